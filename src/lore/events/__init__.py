"""Retrieval events, feedback and alert suggestions: the analytics record (docs/observability.md)."""
