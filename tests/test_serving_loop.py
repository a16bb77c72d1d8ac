"""The event loop a search server runs on: uvloop's when the extra installed it."""

from __future__ import annotations

import asyncio
import importlib.util

import anyio

from lore.serving import event_loop_options
from optional_extras import needs_extra


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@needs_extra("uvloop", "serve")
def test_a_server_loop_is_uvloop_when_installed() -> None:
    options = event_loop_options()
    assert options == {"use_uvloop": True}
    assert anyio.run(_loop_module, backend_options=options).startswith("uvloop")


def test_without_uvloop_the_options_leave_asyncio_as_it_is() -> None:
    if importlib.util.find_spec("uvloop") is not None:
        assert event_loop_options() == {"use_uvloop": True}
    else:
        assert event_loop_options() == {}
        assert anyio.run(_loop_module, backend_options=event_loop_options()).startswith("asyncio")
