"""Alert-aware lookup: from a firing alert to the runbook sections for it.

``lore.alerts.parse`` reads Alertmanager webhooks, single alerts and pasted alert text;
``lore.alerts.lookup`` ranks runbook sections by the evidence the alert carries;
``lore.alerts.tool`` is the ``runbook_for_alert`` tool behind ``lore alert`` and MCP,
run through the same safety chain and audit as ``knowledge_search``.
"""
