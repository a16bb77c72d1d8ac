"""``lore`` command line. See ``lore.cli.app`` for the shared pieces."""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import importlib
import os
import sys
import types
from collections.abc import MutableMapping

from lore import startup_trace
from lore.embedders import query_worker

#: Each module registers its commands on ``app`` when imported.
COMMAND_MODULES = (
    "lore.cli.sync_cmd",  # sync, status, sources
    "lore.cli.search_cmd",  # search (through the tool core and its safety chain)
    "lore.cli.alert_cmd",  # alert (runbook_for_alert, through the same chain)
    "lore.cli.index_cmd",  # reindex (rebuild derived full-text data from SQLite)
    "lore.cli.eval_cmd",  # eval, eval generate
    "lore.cli.mcp_cmd",  # mcp
    "lore.cli.migrate_cmd",  # migrate
    "lore.cli.reembed_cmd",  # reembed (switch embedders)
    "lore.cli.serve_cmd",  # serve (HTTP API, MCP at /mcp, the page)
    "lore.cli.token_cmd",  # token create|list|revoke
    "lore.cli.events_cmd",  # events, events prune, feedback
    "lore.cli.skills_cmd",  # skills list|export (runbooks as Agent Skills)
)


#: The module that registers each command. A run imports only its command's module:
#: importing all of them (sync, eval, reembed and what they import) costs about half a
#: second of a cold ``lore search`` or ``lore mcp``. A command missing here still works:
#: then every module is imported.
COMMAND_MODULE: dict[str, str] = {
    "sync": "lore.cli.sync_cmd",
    "status": "lore.cli.sync_cmd",
    "sources": "lore.cli.sync_cmd",
    "search": "lore.cli.search_cmd",
    "alert": "lore.cli.alert_cmd",
    "reindex": "lore.cli.index_cmd",
    "eval": "lore.cli.eval_cmd",
    "mcp": "lore.cli.mcp_cmd",
    "migrate": "lore.cli.migrate_cmd",
    "reembed": "lore.cli.reembed_cmd",
    "serve": "lore.cli.serve_cmd",
    "token": "lore.cli.token_cmd",
    "events": "lore.cli.events_cmd",
    "feedback": "lore.cli.events_cmd",
    "skills": "lore.cli.skills_cmd",
}
#: The root options that take a value (``lore --config FILE search ...``).
_ROOT_VALUE_OPTIONS = frozenset({"--config", "-c"})


def _command_name(argv: list[str]) -> str | None:
    """The command word of a ``lore`` command line, or None (``lore --help``, no command)."""
    words = iter(argv)
    for word in words:
        if word in _ROOT_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _register_commands(argv: list[str] | None = None) -> None:
    """Import the command modules; with ``argv``, only the one its command needs."""
    module = COMMAND_MODULE.get(_command_name(argv) or "") if argv is not None else None
    for name in (module,) if module else COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    # First, before typer, pydantic and the rest are imported: a cold `lore search` gets
    # its query model ready in a forked process meanwhile (lore.embedders.query_worker).
    startup_trace.mark("main")
    command = _command_name(sys.argv[1:])
    if command in query_worker.QUERY_COMMANDS and _is_the_program():
        _idle_blas_threads_sleep(os.environ)  # before the fork and numpy, which read it
    query_worker.start(sys.argv[1:], command)
    if command in query_worker.QUERY_COMMANDS and _is_the_program():
        _without_pydantic_plugins()
    collecting = gc.isenabled()
    if command in query_worker.QUERY_COMMANDS:
        # A one-shot query allocates little that reference counting does not free, while
        # the cyclic collector's passes over the objects its imports create cost about a
        # tenth of a cold search. A long-running command (mcp, serve, sync) keeps it.
        gc.disable()
        # The interpreter's exit collects once more, disabled or not: a pass over every
        # object the imports made (about a tenth of a cold search again), to free memory
        # the process is about to return anyway. Frozen objects are exempt; run last of
        # the exit handlers (registered first), after anything that writes on exit, and
        # at the exit of a program that runs main() inside it, never before.
        atexit.unregister(gc.freeze)  # once, however often main() runs in one program
        atexit.register(gc.freeze)
    try:
        try:
            _run()
        finally:
            startup_trace.mark("done")
            query_worker.release()
    except SystemExit as exit_:
        if command in query_worker.QUERY_COMMANDS and _is_the_program():
            # With the collector still off: enabling it makes the next allocation collect
            # every object the run made (about 0.03 s), for a process about to end.
            _exit_now(exit_)  # returns where the interpreter's own exit must say something
            gc.freeze()
        raise
    finally:
        if collecting:
            gc.enable()  # main() may run inside another program (tests do)


#: pydantic's plugin loader; importing it imports importlib.metadata (and email, zipfile,
#: csv...), and its first use reads the entry points of every installed distribution.
_PYDANTIC_PLUGIN_LOADER = "pydantic.plugin._loader"


class _NoPydanticPlugins(types.ModuleType):
    """Stands in for pydantic's plugin loader in a one-shot query: ``get_plugins`` finds
    none, as with pydantic's own switch ``PYDANTIC_DISABLE_PLUGINS=__all__``; any other
    name is looked up in the real loader, imported then, so a pydantic that asks for more
    still gets it."""

    def get_plugins(self) -> tuple[()]:
        return ()

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # the import system's probes (__path__, ...)
            raise AttributeError(name)
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


def _without_pydantic_plugins() -> None:
    """A cold ``lore search`` validates lore's settings and its tool arguments with pydantic,
    whose first model looks for plugins: the import and the scan cost about 0.06 s of the
    search, for validation hooks (tracing, logging) nobody sets on a one-shot command.
    Left alone where the user says which plugins to run (``PYDANTIC_DISABLE_PLUGINS``) or
    pydantic has already started."""
    if "PYDANTIC_DISABLE_PLUGINS" in os.environ or _PYDANTIC_PLUGIN_LOADER in sys.modules:
        return
    sys.modules[_PYDANTIC_PLUGIN_LOADER] = _NoPydanticPlugins(_PYDANTIC_PLUGIN_LOADER)


#: OpenBLAS's setting for how long (2**n CPU cycles) an idle thread of its pool spins
#: before it sleeps; its default, 28, is about a tenth of a second.
BLAS_THREAD_TIMEOUT = "OPENBLAS_THREAD_TIMEOUT"


def _idle_blas_threads_sleep(environ: MutableMapping[str, str]) -> None:
    """Importing numpy starts OpenBLAS's thread pool (one thread per further core), whose
    threads busy-wait for work for about 0.1 s before they sleep, and again after every
    product large enough to use them. A one-shot query runs a handful of small products,
    and that spinning cost a cold ``lore search`` about 0.05 s of CPU (a tenth of it) on a
    2-core machine, taken from the core that the query model's worker loads on. The
    shortest wait OpenBLAS takes (2**4 cycles) makes idle threads sleep at once; the pool
    is still there for a product that wants it. Left alone where the user has set it."""
    environ.setdefault(BLAS_THREAD_TIMEOUT, "4")


def _is_the_program() -> bool:
    """Whether ``main`` is the program: the ``lore`` console script (a file named ``lore``
    that imports ``main`` and exits with it), not a program that calls ``main()`` and may
    go on after it (a test, a profiler, ``python -c``)."""
    program = sys.modules.get("__main__")
    path = getattr(program, "__file__", None)
    named_lore = isinstance(path, str) and os.path.basename(path) == "lore"
    return getattr(program, "main", None) is main and named_lore


def _exit_now(exit_: SystemExit) -> None:
    """End a one-shot query with ``exit_``'s status as the interpreter would, minus its
    finalization. Everything the command writes (the audit record, the retrieval event,
    the answer) is written before ``_run`` returns; what the interpreter does after the
    exit handlers is tear down every module and object the imports made, about a twentieth
    of a cold search, for memory the process returns anyway. So: the same exit handlers,
    the same flushes, then ``os._exit``. Returns, leaving it to the interpreter, wherever
    that would say or wait for something: a status that is not a number (printed), a
    thread that is not a daemon (joined), output that cannot be flushed (reported)."""
    import threading

    status = 0 if exit_.code is None else exit_.code
    if not isinstance(status, int):
        return
    main_thread = threading.main_thread()
    if any(thread is not main_thread and not thread.daemon for thread in threading.enumerate()):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()  # runs each handler once, as the interpreter's exit would
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # the interpreter's exit reports it, as it always did
    startup_trace.mark("exit without teardown")
    os._exit(status & 0xFF)


def _run() -> None:
    from lore.cli.shell import INTERRUPTED_EXIT, print_error
    from lore.errors import LoreError

    try:
        _run_writing(sys.argv[1:])
    except LoreError as err:
        print_error(str(err))
        sys.exit(2)
    except KeyboardInterrupt:  # outside a command: while importing, parsing arguments
        _interrupted()
    except SystemExit as exit_:
        # Inside a command, typer turns Ctrl-C into a silent exit 130; say why once.
        if exit_.code == INTERRUPTED_EXIT:
            _interrupted()
        raise


def _usage_error(err: Exception) -> str:
    """``Missing option '--name'. See 'lore token create --help'.``"""
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    context = getattr(err, "ctx", None)
    command = getattr(context, "command_path", None)
    if not command:
        return message
    ended = message if message.endswith((".", "?", "!")) else f"{message}."
    return f"{ended} See '{command} --help'."


def _run_command(argv: list[str]) -> None:
    """The command, through the typer application, or for a plain ``lore search``
    straight to it (``lore.cli.search_args``: typer's import is a measurable share of a
    cold search); either way it ends in ``SystemExit``, 0 on success, as click ends."""
    from lore.cli import search_args

    call = search_args.read(argv) if _command_name(argv) == "search" else None
    if call is not None:
        from lore.cli import shell
        from lore.cli.search_run import run_search

        shell.state.config_file = call.config
        shell.state.settings = None
        startup_trace.mark("cli app imported")
        startup_trace.mark("command registered")
        run_search(**call.arguments)  # type: ignore[arg-type]
        sys.exit(0)
    import typer

    from lore.cli.app import app
    from lore.cli.shell import print_error

    startup_trace.mark("cli app imported")
    _register_commands(argv)
    startup_trace.mark("command registered")
    try:
        # Not standalone: a usage error comes back here, to be said in one line, instead
        # of typer's usage, hint and boxed message on three to five lines.
        status = app(standalone_mode=False)
    except typer.TyperException as err:  # click's usage errors (a missing option, --limit 0)
        if type(err).__name__ != "NoArgsIsHelpError":  # `lore` alone: the help is printed
            print_error(_usage_error(err))
        sys.exit(err.exit_code)
    except typer.Abort:  # end of input at a prompt
        print_error("aborted", prefix="")
        sys.exit(1)
    # A command's typer.Exit(code); Ctrl-C inside a command is 130, which _run says once.
    sys.exit(status if isinstance(status, int) else 0)


#: The status of a command whose reader went away: what a shell reports for a program
#: killed by SIGPIPE (128 + 13), as ``git log | head`` ends. lore leaves SIGPIPE ignored,
#: as Python does (``lore serve`` and ``lore mcp`` write to sockets and pipes that a
#: client may close), and ends with that status itself, after its exit handlers.
PIPE_CLOSED_EXIT = 128 + 13


def _run_writing(argv: list[str]) -> None:
    """``_run_command``, ended quietly with ``PIPE_CLOSED_EXIT`` wherever stdout's reader
    went away: while a command prints, while click prints (help, usage), or when what is
    still buffered is flushed at the end."""
    try:
        try:
            _run_command(argv)
        except SystemExit:
            # click ends a command that met a closed stdout itself, with status 1 and
            # nothing said; the one trace it leaves is stdout wrapped to ignore the flush.
            if type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):
                raise BrokenPipeError(errno.EPIPE, "stdout closed") from None
            sys.stdout.flush()  # fails here, not in the interpreter's exit with a traceback
            raise
    except OSError as err:
        if err.errno != errno.EPIPE:
            raise
        _pipe_closed()


def _pipe_closed() -> None:
    """The reader of stdout went away (``lore search ... | head -1``): exit with nothing
    more said, and nothing left to flush at exit to fail again."""
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(null, stream.fileno())
    sys.exit(PIPE_CLOSED_EXIT)


def _interrupted() -> None:
    from lore.cli.shell import INTERRUPTED_EXIT, print_error

    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while saying so
        print_error("interrupted", prefix="")
    sys.exit(INTERRUPTED_EXIT)
