"""Interruptible reads (lore.interrupt): what they return, and that a Ctrl-C ends them.

The race they close (a SIGINT landing between the interpreter's last signal check and the
start of a blocking read) cannot be staged deterministically from Python; the subprocess
tests that send SIGINT to an idle ``lore mcp`` and to ``lore reembed``'s prompt are its
witnesses, and failed about one run in ten on a loaded machine before this module."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from lore.interrupt import lines


def test_lines_of_a_pipe_split_like_readline_and_keep_an_unterminated_last_line() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as writer:
        writer.write(b'{"a":1}\n\n{"b":2}\n{"c"')
    with os.fdopen(read_end, "rb") as reader:
        assert list(lines(reader)) == [b'{"a":1}\n', b"\n", b'{"b":2}\n', b'{"c"']


def test_lines_of_a_stream_without_a_descriptor_read_it_as_readline_does() -> None:
    assert list(lines(io.BytesIO(b"one\ntwo"))) == [b"one\n", b"two"]


def test_a_line_written_in_pieces_arrives_whole() -> None:
    read_end, write_end = os.pipe()

    def write_slowly() -> None:
        with os.fdopen(write_end, "wb", buffering=0) as writer:
            for piece in (b'{"jsonrpc":', b'"2.0"}', b"\nnext\n"):
                writer.write(piece)

    writer = threading.Thread(target=write_slowly)
    writer.start()
    with os.fdopen(read_end, "rb") as reader:
        assert list(lines(reader)) == [b'{"jsonrpc":"2.0"}\n', b"next\n"]
    writer.join()


def _in_a_fresh_interpreter(body: str) -> None:
    """Signals are sent to a fresh interpreter of its own, aimed at its main thread: the
    test process holds the threads and handlers of every test before it, and a signal is
    the whole process's business."""
    script = "import os, signal, threading\nfrom lore.interrupt import wait_readable\n"
    script += textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert result.returncode == 0, result.stderr


def test_a_signal_whose_handler_returns_does_not_end_the_wait() -> None:
    _in_a_fresh_interpreter("""
        main = threading.main_thread().ident
        read_end, write_end = os.pipe()
        seen = []
        signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
        signal.pthread_kill(main, signal.SIGUSR1)  # handled before the wait: must not wake it
        timer = threading.Timer(0.2, os.write, (write_end, b"x"))
        timer.start()
        wait_readable(read_end)
        timer.join()
        assert seen == [signal.SIGUSR1], seen
        assert os.read(read_end, 1) == b"x"
    """)


def test_sigint_during_the_wait_raises_keyboardinterrupt_and_restores_the_wakeup_fd() -> None:
    _in_a_fresh_interpreter("""
        main = threading.main_thread().ident
        read_end, write_end = os.pipe()
        timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        try:
            wait_readable(read_end)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the wait outlived a SIGINT")
        timer.join()
        assert signal.set_wakeup_fd(-1) == -1  # the wait put back the fd it found (none)
    """)


def test_a_sigint_sent_the_moment_a_prompt_is_shown_always_ends_it(tmp_path: Path) -> None:
    """Many prompts, each interrupted as soon as its text is read: none may hang."""
    script = tmp_path / "prompt.py"
    script.write_text(textwrap.dedent("""
        import sys
        from lore.interrupt import read_line
        try:
            read_line("ask> ")
        except KeyboardInterrupt:
            sys.exit(130)
    """))
    for _ in range(20):
        terminal, child_end = os.openpty()
        try:
            process = subprocess.Popen(
                [sys.executable, str(script)], stdin=child_end, stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            os.close(child_end)
            assert process.stdout is not None
            shown = b""
            while b"ask> " not in shown:
                chunk = process.stdout.read1(64)
                assert chunk
                shown += chunk
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 130
        finally:
            os.close(terminal)
