"""``LoreSettings`` reads the config file, ``LORE_*`` variables and keyword arguments the
way pydantic-settings' ``BaseSettings`` did with those three sources (lore.config_sources
does it without importing pydantic-settings): each case below is loaded both ways, by
lore and by a ``BaseSettings`` with LoreSettings' fields and the sources it had, and the
two must agree, values and errors alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError, create_model
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from lore.config import LoreSettings, load_settings
from lore.config_sources import names_a_setting
from lore.errors import ConfigError
from lore.sources import typed_source_config

SOURCE = '[[sources]]\nname = "runbooks"\npath = "docs"\nvisibility = "all-viewers"\n'
CASES: list[tuple[str, dict[str, str], dict[str, Any]]] = [
    # (lore.toml, environment, keyword arguments)
    ('backend = "sqlite"\ntop_k = 5\n', {}, {}),
    ("top_k = 5\n", {"LORE_TOP_K": "3"}, {}),
    ("top_k = 5\n", {"LORE_TOP_K": "3"}, {"top_k": 7}),
    ("Top_K = 4\nBACKEND = 'sqlite'\n", {}, {}),
    ("", {"lore_backend": "pgvector", "LORE_PG_DSN": "postgresql://127.0.0.1/x"}, {}),
    ("[safety]\nredact_emails = true\n", {"LORE_SAFETY__MAX_RESULT_CHARS": "300"}, {}),
    ("", {"LORE_SAFETY__ALLOWED_LINK_HOSTS": '["docs.example.org"]'}, {}),
    ("", {"LORE_SAFETY": '{"max_passage_chars": 50}'}, {}),
    ("", {"LORE_FALLBACK__DB_PATH": "fallback.db"}, {}),
    (SOURCE, {"LORE_EVENTS__ENABLED": "false", "LORE_UNRELATED": "1", "LORE_CONFIG": "x.toml"}, {}),
    ("", {"LORE_SOURCES": '[{"name": "notes", "path": "docs", "visibility": "all-viewers"}]'}, {}),
    (SOURCE + "[vault]\nenabled = false\n", {}, {"vault": {"every": "12h"}}),
    ("", {"LORE_CACHE_DIR": "", "LORE_EMBEDDING_MODEL": "x"}, {"db_path": Path("other.db")}),
    # refused alike
    ("[safety]\nmax_result_char = 100\n", {}, {}),
    ("", {"LORE_SAFETY__MAX_RESULT_CHAR": "100"}, {}),
    ("top_k = 0\n", {"LORE_RRF_K": "many"}, {}),
    ('embeder = "openai"\n', {}, {}),
]


def _reference(toml_file: Path) -> type[BaseModel]:
    """LoreSettings as it was: a BaseSettings reading keywords, environment, then the file."""

    class Base(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="LORE_", env_nested_delimiter="__", extra="forbid")

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=toml_file)

    declared = LoreSettings.model_fields
    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in declared.items()}
    model: type[BaseModel] = create_model("Reference", __base__=Base, **fields)
    return model


def _outcome(build: Any) -> tuple[str, Any]:
    try:
        return "settings", build()
    except ValidationError as err:
        return "refused", [(error["loc"], error["type"]) for error in err.errors()]


@pytest.mark.parametrize(("toml", "environment", "keywords"), CASES)
def test_settings_are_read_as_pydantic_settings_read_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    toml: str,
    environment: dict[str, str],
    keywords: dict[str, Any],
) -> None:
    (tmp_path / "docs").mkdir()
    config = tmp_path / "lore.toml"
    config.write_text(toml, encoding="utf-8")
    for name in list(os.environ):
        if name.lower().startswith("lore_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    reference = _reference(config)

    def lore() -> dict[str, Any]:
        try:
            return load_settings(config, **keywords).model_dump(exclude={"config_file"})
        except ConfigError as err:  # the reference's refusal is pydantic's, unwrapped
            if not isinstance(err.__cause__, ValidationError):
                raise
            raise err.__cause__ from None

    def expected() -> dict[str, Any]:
        dumped = reference(**keywords).model_dump(exclude={"config_file"})
        # The reference does not type [[sources]] tables (LoreSettings' validator does).
        tables = enumerate(dumped["sources"], start=1)
        typed = [typed_source_config(table, number) for number, table in tables]
        return dumped | {"sources": [source.model_dump() for source in typed]}

    got, want = _outcome(lore), _outcome(expected)
    assert got == want


def test_a_variable_names_a_setting_only_with_the_prefix_and_a_field_name() -> None:
    assert names_a_setting(LoreSettings, {"LORE_TOP_K": "1"})
    assert names_a_setting(LoreSettings, {"lore_safety__max_result_chars": "1"})
    assert not names_a_setting(LoreSettings, {"LORE_CONFIG": "x", "LORE_TRACE_STARTUP": "t", "TOP_K": "1"})
    assert not names_a_setting(LoreSettings, {"LORE_SAFETYX": "1"})


def test_settings_without_a_setting_variable_never_import_pydantic_settings(tmp_path: Path) -> None:
    config = tmp_path / "lore.toml"
    config.write_text("top_k = 3\n", encoding="utf-8")
    script = (
        "import sys; from lore.config import load_settings; "
        f"assert load_settings({str(config)!r}).top_k == 3; "
        "print('pydantic_settings' in sys.modules)"
    )
    env = {name: value for name, value in os.environ.items() if not name.lower().startswith("lore_")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
