"""The credential-context grammar (``lore.safety.secret_context``): every format row
redacts its planted case and leaves its benign look-alike as it is; front-matter labels
are read with their key; nothing of a context case is stored in clear after a sync."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from lore.config import load_settings
from lore.models import Document
from lore.safety.secret_context import FORMATS
from lore.safety.secrets import SecretRedactor, redact_document
from lore.sync import run_sync
from lore.testing.attacks import PlantedCase
from lore.testing.attacks.secrets import SECRET_LOOKALIKES, context_secret_cases

REDACTOR = SecretRedactor()
CASES = context_secret_cases()


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_context_case_is_redacted_with_its_kind(case: PlantedCase) -> None:
    redacted, findings = REDACTOR.redact(case.text)
    assert case.kind in findings, (case.name, redacted)
    for payload in case.payloads:
        assert payload not in redacted, (case.name, redacted)


@pytest.mark.parametrize("text", SECRET_LOOKALIKES)
def test_each_look_alike_survives(text: str) -> None:
    assert REDACTOR.redact(text) == (text, {})


def test_a_redacted_text_stays_as_it_is() -> None:
    once, _ = REDACTOR.redact("\n\n".join(case.text for case in CASES))
    assert REDACTOR.redact(once) == (once, {})


def test_every_format_row_compiles_and_is_exercised() -> None:
    """A row of the table is a format; each has a planted case that only it catches
    (the control: with the row gone, its case leaks)."""
    names = {fmt.name for fmt in FORMATS}
    assert {"netrc", "pgpass", "oracle", "env_pair", "http_header", "query_param", "ppk", "stdin"} <= names
    for fmt in FORMATS:
        fmt.rule()


def test_a_continued_value_loses_its_tail_but_keeps_the_layout() -> None:
    text = "export DB_PASSWORD=" + "Fake" + "Head0123456789\\\n    " + "Fake" + "Tail0123\nnext line\n"
    redacted, _ = REDACTOR.redact(text)
    assert redacted == "export DB_PASSWORD=[REDACTED:password]\\\n    [REDACTED:password]\nnext line\n"


def test_a_front_matter_value_is_read_with_its_key() -> None:
    value = "Fake" + "Front" + "9pw"
    document = Document(
        uri="file://runbooks/a.md", title="A", text="# A\n\nText.\n", revision="1",
        updated_at=datetime(2026, 1, 1, tzinfo=UTC), labels={"db_password": value, "owner": "sre"},
    )  # fmt: skip
    cleaned = redact_document(document)
    assert cleaned.labels == {"db_password": "[REDACTED:password]", "owner": "sre"}


def test_nothing_of_a_context_case_is_stored_in_clear(tmp_path: Path) -> None:
    """Front matter (labels), an HTML comment and the body, synced into SQLite and the
    full-text index, read back as bytes: no planted value anywhere."""
    front = "Fake" + "Label" + "9pw"
    comment = "Fake" + "Html" + "9pw"
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    body = "\n\n".join(case.text for case in CASES)
    (runbooks / "ctx.md").write_text(
        f"---\ntitle: Context\ndb_password: {front}\n---\n# Context\n\n"
        f"<!-- api_password: {comment} -->\n\n{body}\n",
        encoding="utf-8",
    )
    config = tmp_path / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "hashing"\n\n'
        '[[sources]]\nname = "r"\ntype = "filesystem"\npath = "runbooks"\nvisibility = "all-viewers"\n',
        encoding="utf-8",
    )
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and "runbooks" not in p.parts]
    assert stored
    blobs = [p.read_bytes() for p in stored]
    planted = [front, comment, *(payload for case in CASES for payload in case.payloads)]
    leaked = [value for value in planted if any(value.encode() in blob for blob in blobs)]
    assert leaked == []
    # the control: the source file holds every one of them
    source = (runbooks / "ctx.md").read_text(encoding="utf-8")
    assert all(value in source for value in planted)


def test_a_table_cell_is_read_with_its_column_header_through_the_view() -> None:
    """The view pairs the cell with its header (``password: …``) and the grammar's
    key/value row reads it: no block rule of the table's own finds it."""
    from lore.safety.canonical import render
    from lore.safety.secret_context import _table_cells

    value = "Fake" + "Cell" + "7pw"
    table = f"| host | user | password |\n|---|---|---|\n| db01 | app | `{value}` |\n"
    assert f"password: {value}" in render(table).text
    assert _table_cells(table) == []
    redacted, found = SecretRedactor().redact(table)
    assert value not in redacted
    assert "| db01 | app | `[REDACTED:password]` |" in redacted
    assert found == {"password": 1}


@pytest.mark.parametrize(
    "table",
    [
        "| user | password |\n|---|---|\n| app | stored in Vault |\n| ops | `<your-password>` |\n",
        "| password policy | value |\n|---|---|\n| length | 12 or more |\n",
        "| step | command |\n|---|---|\n| 1 | `psql --password --port=5432` |\n",
    ],
)
def test_a_table_about_passwords_that_holds_none_is_kept(table: str) -> None:
    assert SecretRedactor().redact(table) == (table, {})
