"""A missing extra skips on a developer's machine and fails under CI=true, where `make install`
has installed every extra and a skip would hide a broken install."""

from __future__ import annotations

import pytest

from optional_extras import needs_extra, require_extra

ABSENT = "lore_no_such_module_for_this_test"


@pytest.mark.parametrize("ci", ["true", "1", "TRUE", "yes"])
def test_missing_extra_fails_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=rf"CI=true and '{ABSENT}' is not installed"):
        require_extra(ABSENT, "qdrant")
    with pytest.raises(pytest.fail.Exception, match=r"lore-sre\[litellm\]"):
        needs_extra(ABSENT, "litellm")


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_missing_extra_skips_elsewhere(monkeypatch: pytest.MonkeyPatch, ci: str | None) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match=r"pip install 'lore-sre\[qdrant\]'"):
        require_extra(ABSENT, "qdrant")
    mark = needs_extra(f"{ABSENT}.child", "litellm")  # a dotted name whose parent is missing too
    assert mark.args == (True,)


def test_present_module_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert require_extra("json", "dev").__name__ == "json"
    assert needs_extra("json", "dev").args == (False,)
