"""What a tool's configuration decides, as values: the composition root
(``lore.resolve.tool_policy``) reads them from the settings once and hands them to
``KnowledgeSearch``, which never sees the settings themselves.

    top_k, min_confidence, stale_after_days   the answer's size, floor and staleness
    safety                                    screening, redaction and the cap
    source_weights                            the sources' priorities (``lore.priority``)
    alerts, source_types                      how ``runbook_for_alert`` maps a runbook URL
    index_name                                the index a trace names (``gen_ai.data_source.id``)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lore.confidence import Confidence
from lore.config import AlertSettings, SafetySettings
from lore.source_tables import SourceConfig


@dataclass(frozen=True)
class ToolPolicy:
    top_k: int
    min_confidence: Confidence
    stale_after_days: int
    safety: SafetySettings
    #: Source name -> weight, only those other than 1.0 (``lore.priority``).
    source_weights: Mapping[str, float]
    alerts: AlertSettings
    #: Source name -> its type (``git``, ``filesystem``, ...), for runbook URL rules.
    source_types: Mapping[str, str]
    #: The configured index's name, as traces name the data source.
    index_name: str
    #: The ``[[sources]]`` tables and ``[vault] skills``, for the skills catalog's rules
    #: (``lore.skills.select.skill_rules``).
    skill_sources: tuple[SourceConfig, ...]
    vault_skills: bool
