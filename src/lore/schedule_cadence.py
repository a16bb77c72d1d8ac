"""How often a source is synced: the ``every = "6h"`` of a ``[[sources]]`` table, and the
jitter added to each due time.

Durations are written as a number and a unit, or several of them (``90s``, ``30m``,
``6h``, ``1d``, ``1h30m``). A regular expression of a few lines rather than a dependency:
no well-kept library parses exactly this short form without also accepting words
("in two hours") or ISO 8601 that a config reader would not expect.
"""

from __future__ import annotations

import random
import re
from datetime import timedelta

#: The built-in playbook pack is synced once a day unless ``[vault] every`` says otherwise.
VAULT_DEFAULT_EVERY = timedelta(hours=24)
#: Shorter cadences would re-list a source faster than most syncs finish.
MIN_EVERY = timedelta(minutes=1)
#: Each due time is pushed back by up to this share of the cadence, so sources with the
#: same cadence (and lore instances started together) do not hit one server at once.
JITTER_FRACTION = 0.1
#: The jitter never exceeds this, so a weekly source is not a day late.
MAX_JITTER = timedelta(minutes=30)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+)([smhdw])")
_WHOLE = re.compile(r"(?:\d+[smhdw])+")


def parse_every(text: str) -> timedelta:
    """``"6h"`` -> 6 hours. Raises ``ValueError`` with a message fit for a config error."""
    compact = text.strip().lower().replace(" ", "")
    if not _WHOLE.fullmatch(compact):
        raise ValueError(
            f"{text!r} is not a duration: write a number and a unit (s, m, h, d or w), "
            'e.g. "30m", "6h", "1d" or "1h30m"'
        )
    seconds = sum(int(number) * _UNITS[unit] for number, unit in _PART.findall(compact))
    every = timedelta(seconds=seconds)
    if every < MIN_EVERY:
        raise ValueError(f"{text!r} is shorter than the shortest cadence, {format_every(MIN_EVERY)}")
    return every


def format_every(every: timedelta) -> str:
    """The inverse of ``parse_every`` for display: 1 day 6 hours -> ``"1d6h"``."""
    seconds = int(every.total_seconds())
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        count, seconds = divmod(seconds, _UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def jitter(every: timedelta, rng: random.Random) -> timedelta:
    """A random delay from zero to ``JITTER_FRACTION`` of ``every`` (at most ``MAX_JITTER``)."""
    bound = min(every * JITTER_FRACTION, MAX_JITTER)
    return timedelta(seconds=rng.uniform(0, bound.total_seconds()))
