"""The tool's limits, apart from the tool: ``lore search`` names them in its ``--help`` and
checks its options against them before it imports the tool core and its safety chain."""

from __future__ import annotations

#: Hard ceiling on ``top_k`` whatever the settings say, so one call cannot flood a context.
MAX_TOP_K = 50
