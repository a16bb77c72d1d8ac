"""What a search server sets up for its process: the event loop (uvloop's when the extra
installed it) and the GIL's switch interval."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import anyio
import pytest

from lore.embedders import openvino_runtime
from lore.serving import SWITCH_INTERVAL_SECONDS, configure_server_process, event_loop_options
from optional_extras import needs_extra


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@needs_extra("uvloop", "serve")
def test_a_server_loop_is_uvloop_when_installed() -> None:
    options = event_loop_options()
    assert options == {"use_uvloop": True}
    assert anyio.run(_loop_module, backend_options=options).startswith("uvloop")


def test_without_uvloop_the_options_leave_asyncio_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    # What an install without the extra sees, whether or not this venv has uvloop.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "uvloop" else find_spec(name, *args)
    )
    assert event_loop_options() == {}
    assert anyio.run(_loop_module, backend_options=event_loop_options()).startswith("asyncio")


def test_a_server_process_hands_the_gil_over_every_millisecond() -> None:
    before = sys.getswitchinterval()
    try:
        configure_server_process()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS)
    finally:
        sys.setswitchinterval(before)
        openvino_runtime.set_query_threads(None)
