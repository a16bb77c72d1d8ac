"""The secret detector's Go runtime beside the in-process local model.

betterleaks carries a Go runtime into lore's process. After a query inference on the local
model (OpenVINO, whose native threads are its own), the searches of
``tests/test_query_batching.py`` (the safety chain scanning passages on the event loop's
worker threads) crashed the whole process in Go's garbage collector (SIGSEGV in
``runtime.startTheWorldWithSema``) unless Go's asynchronous preemption is off. Go reads
``GODEBUG`` from the environment the process started with (setting it from Python is too
late), so the Makefile and the container image export ``GODEBUG=asyncpreemptoff=1``. The
sequence runs in a fresh process, so a crash is a failed assertion here and not the end of
the test run; the control forces preemption on and shows the sequence is one that crashes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("betterleaks")
pytest.importorskip("openvino")

TESTS = Path(__file__).resolve().parent
SEQUENCE = "local_model_gives or test_each_searchs_event"


def _run(godebug: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_") and k != "GODEBUG"}
    if godebug is not None:
        env["GODEBUG"] = godebug
    module = str(TESTS / "test_query_batching.py")
    command = [sys.executable, "-m", "pytest", module, "-q", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, "-k", SEQUENCE], env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_scanning_after_an_in_process_inference_keeps_the_process_alive() -> None:
    result = _run("asyncpreemptoff=1")
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    assert "2 passed" in result.stdout


@pytest.mark.slow
def test_other_godebug_settings_beside_it_keep_it_working() -> None:
    assert _run("madvdontneed=1,asyncpreemptoff=1").returncode == 0


@pytest.mark.slow
def test_control_with_preemption_forced_on_the_sequence_crashes() -> None:
    result = _run("asyncpreemptoff=0")
    assert result.returncode < 0, result.stdout[-500:]  # killed by a signal
