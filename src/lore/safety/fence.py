"""The tag lore's renderer fences each passage with (``lore.tool.render``), which the
screening (``lore.safety.injection``) neutralises wherever a document imitates it.

A module of its own so that the renderer names the tag without loading the screening:
a search whose passages' chain results were kept at sync never runs the screening.
"""

from __future__ import annotations

#: The tag lore's renderer fences each passage with; text imitating it is neutralised.
FENCE_TAG = "untrusted-reference"
