"""lore.toml validation: a misspelt key is an error naming it and the nearest valid key,
in the top level, in nested tables and in each ``[[sources]]`` table (validated by the
model of its type), through ``load_settings`` and as a real ``lore`` subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lore.config import LoreSettings, SourceConfig, load_settings
from lore.errors import ConfigError
from lore.sources import build_source, typed_source_config
from lore.sources.filesystem import FilesystemSourceConfig

LORE = Path(sys.executable).parent / "lore"

SOURCE = '[[sources]]\nname = "runbooks"\npath = "docs"\nvisibility = "all-viewers"\n'


def write_config(root: Path, text: str) -> Path:
    (root / "docs").mkdir(exist_ok=True)
    config = root / "lore.toml"
    config.write_text('embedder = "hashing"\n' + text)
    return config


@pytest.fixture(autouse=True)
def _no_lore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LORE_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (SOURCE + 'excludes = ["drafts/"]\n',
         """unknown key 'excludes' in [[sources]] "runbooks" (did you mean 'exclude'?)"""),
        ('embeder = "openai"\n', "unknown key 'embeder' (did you mean 'embedder'?)"),
        ("[safety]\nmax_result_char = 100\n",
         "unknown key 'max_result_char' in [safety] (did you mean 'max_result_chars'?)"),
        ('[[source]]\nname = "runbooks"\n', "unknown key 'source' (did you mean 'sources'?)"),
        ('[[sources]]\nname = "runbooks"\ntype = "filesytem"\n',
         """[[sources]] "runbooks": unknown type 'filesytem' (did you mean 'filesystem'?)"""),
        ('[[sources]]\npath = "docs"\nincludes = ["*.md"]\n',
         "unknown key 'includes' in [[sources]] #1 (did you mean 'include'?)"),
        (SOURCE + "max_file_bytes = 0\n",
         """[[sources]] "runbooks": max_file_bytes: Input should be greater than 0"""),
        ('zzz_unrelated = 1\n', "unknown key 'zzz_unrelated'"),
    ],
)
def test_a_misspelt_key_is_an_error_naming_it(tmp_path: Path, toml: str, message: str) -> None:
    config = write_config(tmp_path, toml)

    with pytest.raises(ConfigError) as caught:
        load_settings(config)

    assert str(caught.value).startswith(f"{config}: {message}")
    assert "\n" not in str(caught.value)


def test_no_suggestion_when_nothing_is_close(tmp_path: Path) -> None:
    config = write_config(tmp_path, "zzz_unrelated = 1\n")

    with pytest.raises(ConfigError, match=r"unknown key 'zzz_unrelated'$"):
        load_settings(config)


def test_each_source_type_validates_its_own_table(tmp_path: Path) -> None:
    config = write_config(tmp_path, SOURCE + 'exclude = ["drafts/"]\nmax_file_bytes = 1234\n')

    settings = load_settings(config)

    (source,) = settings.sources
    assert isinstance(source, FilesystemSourceConfig)
    assert (source.exclude, source.max_file_bytes) == (["drafts/"], 1234)
    assert source.location(settings) == str(tmp_path / "docs")


def test_a_nested_environment_variable_is_named_as_the_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path, "")
    monkeypatch.setenv("LORE_SAFETY__MAX_RESULT_CHAR", "100")

    with pytest.raises(ConfigError, match=r"^LORE_SAFETY__MAX_RESULT_CHAR: unknown key 'max_result_char' in "
                       r"\[safety\] \(did you mean 'max_result_chars'\?\)$"):
        load_settings(config)


def test_unknown_top_level_environment_variables_are_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Documented: the LORE_ prefix may be shared by other programs' variables.
    config = write_config(tmp_path, "")
    monkeypatch.setenv("LORE_EMBEDER", "openai")

    assert load_settings(config).embedder == "hashing"


def test_python_callers_get_the_same_validation() -> None:
    misspelt = SourceConfig.model_validate({"name": "docs", "path": ".", "excludes": []})
    with pytest.raises(ConfigError, match="unknown key 'excludes'"):
        LoreSettings(sources=[misspelt])
    with pytest.raises(ConfigError, match="unknown key 'excludes'"):
        build_source(misspelt, LoreSettings())
    typed = typed_source_config(SourceConfig.model_validate({"name": "docs", "path": "."}))
    assert isinstance(typed, FilesystemSourceConfig)


def run_lore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("LORE_")}
    env.update(COLUMNS="200", NO_COLOR="1")
    return subprocess.run([str(LORE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["sync"], ["status"], ["sources"], ["search", "etcd"]])
def test_subprocess_any_command_with_a_typo_exits_2_with_one_line(tmp_path: Path, command: list[str]) -> None:
    write_config(tmp_path, SOURCE + 'excludes = ["drafts/"]\n')

    result = run_lore(*command, cwd=tmp_path)

    assert result.returncode == 2, (result.stdout, result.stderr)
    # The brackets survive: the message is printed as text, not as rich markup.
    assert result.stderr == (
        """error: lore.toml: unknown key 'excludes' in [[sources]] "runbooks" (did you mean 'exclude'?)\n"""
    )
    assert not (tmp_path / "lore.db").exists()


def test_a_dump_keeps_each_source_types_own_keys(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, SOURCE + 'exclude = ["drafts/"]\n'))

    assert settings.model_dump()["sources"][0]["exclude"] == ["drafts/"]
