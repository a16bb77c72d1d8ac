"""``lore.safety.lazy_regex``: a redaction rule's pattern compiled on first use answers
exactly as the compiled pattern does, and a broken one fails at that use, never by
matching nothing."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from lore.safety.lazy_regex import compile_later


def test_a_lazy_pattern_answers_as_the_compiled_one() -> None:
    source = r"(?P<key>token)\s*=\s*(?P<value>\w+)"
    text = "token = abc123; TOKEN=def456"
    lazy, eager = compile_later(source, re.IGNORECASE), re.compile(source, re.IGNORECASE)
    assert lazy.pattern == source  # readable before any compilation
    assert lazy.sub("[x]", text) == eager.sub("[x]", text)
    assert [m.span("value") for m in lazy.finditer(text)] == [m.span("value") for m in eager.finditer(text)]
    assert lazy.groups == eager.groups
    assert lazy.groupindex == eager.groupindex
    assert lazy.flags == eager.flags
    assert lazy.fullmatch("token=x") is not None
    assert lazy.search("nothing here") is None


def test_a_broken_pattern_fails_at_its_first_use() -> None:
    broken = compile_later(r"(unclosed")
    with pytest.raises(re.error):
        broken.search("unclosed")


def test_a_lazy_pattern_can_be_copied_before_and_after_its_first_use() -> None:
    lazy = compile_later(r"\d+")
    assert copy.deepcopy(lazy).findall("a1b22") == ["1", "22"]
    assert copy.copy(lazy).findall("a1b22") == ["1", "22"]


def test_a_redactor_compiles_only_the_rules_a_text_reaches() -> None:
    """What a cold search saves: building the redactor compiles none of its own rules'
    patterns (detect-secrets' are compiled on first use too), and redacting a short query
    compiles the few whose hints it holds and those without hints, in a fresh process."""
    script = (
        "import gc\n"
        "from lore.safety.lazy_regex import _LazyPattern\n"
        "from lore.safety.secrets import SecretRedactor\n"
        "redactor = SecretRedactor()\n"
        "lazy = [o for o in gc.get_objects() if isinstance(o, _LazyPattern)]\n"
        "compiled = lambda: sum('sub' in vars(pattern) for pattern in lazy)\n"
        "before = compiled()\n"
        "redacted = redactor.redact('etcd has no leader')[0]\n"
        "print(len(lazy), before, compiled(), redacted)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    patterns, before, after, redacted = done.stdout.split(maxsplit=3)
    assert int(patterns) > 80
    assert int(before) == 0
    assert 0 < int(after) < 20
    assert redacted.strip() == "etcd has no leader"
