"""The Grafana dashboard and the Prometheus alert rules shipped in deploy/: they parse,
every PromQL expression is valid (promql-parser, the Rust parser GreptimeDB uses; promtool
is not available here), every ``lore_*`` series they name exists in lore's registry, and
every alert links a runbook in docs/runbooks/ that names it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import frontmatter
import pytest
import yaml

from optional_extras import require_extra

require_extra("prometheus_client", "serve")
promql_parser = require_extra("promql_parser", "dev")

from lore import metrics  # noqa: E402
from lore.access import LOCAL  # noqa: E402
from lore.backends.sqlite import SqliteBackend  # noqa: E402
from lore.config import LoreSettings  # noqa: E402
from lore.resolve import index_scope  # noqa: E402
from lore.testing.embedders import CountingEmbedder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "lore-rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "lore-dashboard.json"
RUNBOOKS = ROOT / "docs" / "runbooks"
#: Grafana's variables, replaced by what Grafana would put there before parsing.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$instance": ".*", "${datasource}": "x"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


@pytest.fixture(scope="module")
def registry_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every series name lore exposes, the index gauges included (published for a real
    SQLite index, as the servers do)."""
    backend = SqliteBackend(tmp_path_factory.mktemp("index") / "lore.db", CountingEmbedder())
    metrics.expose(backend, index_scope(LoreSettings(vault={"enabled": False})))
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    backend.close()
    return names


def selectors(expression: str) -> set[str]:
    """The metric names of an expression's selectors (raises ValueError when it does not parse)."""
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            found.add(node.name)

    promql_parser.walk(promql_parser.parse(expression), visit)
    return found


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"]]


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    model = json.loads(DASHBOARD.read_text(encoding="utf-8"))

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(model["panels"]):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]
    for variable in model["templating"]["list"]:
        query = variable.get("definition", "")
        if query.startswith("label_values("):  # Grafana's own function; its first argument is PromQL
            yield variable["name"], query[len("label_values(") :].rsplit(",", 1)[0]


def grafana_free(expression: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expression = expression.replace(variable, value)
    assert "$" not in expression, f"an unknown Grafana variable in {expression!r}"
    return expression


def test_the_rules_are_prometheus_rule_groups() -> None:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert set(document) == {"groups"}
    group_names = [group["name"] for group in document["groups"]]
    assert len(group_names) == len(set(group_names))
    alerts = []
    for group in document["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"}
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            assert isinstance(rule["alert"], str)
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert isinstance(rule["expr"], str)
            assert DURATION.match(rule.get("for", "0s"))
            assert all(isinstance(value, str) for value in rule.get("labels", {}).values())
            assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
            alerts.append(rule["alert"])
    assert len(alerts) == len(set(alerts))
    wanted = {"LoreSyncFailing", "LoreIndexStale", "LoreDegradedSearches", "LoreEventsDropped"}
    wanted.add("LoreBreakerOpen")
    assert wanted <= set(alerts)


def test_every_rule_expression_parses_and_names_only_series_lore_exposes(registry_names: set[str]) -> None:
    for rule in rules():
        named = selectors(rule["expr"])
        assert named, rule["alert"]
        unknown = {name for name in named if name.startswith("lore_")} - registry_names
        assert not unknown, f"{rule['alert']}: {sorted(unknown)} not in lore's registry"
        assert all(name.startswith("lore_") for name in named)


def test_every_dashboard_query_parses_and_names_only_series_lore_exposes(registry_names: set[str]) -> None:
    seen: set[str] = set()
    for title, expression in dashboard_expressions():
        named = selectors(grafana_free(expression))
        assert named, title
        unknown = named - registry_names
        assert not unknown, f"panel {title!r}: {sorted(unknown)} not in lore's registry"
        seen |= named
    # The panels the dashboard promises.
    for needed in (
        "lore_retrievals_total",
        "lore_retrieval_seconds_bucket",
        "lore_top_score_bucket",
        "lore_sync_runs_total",
        "lore_sync_last_success_timestamp_seconds",
        "lore_stale_documents",
        "lore_events_dropped_total",
        "lore_breaker_state",
    ):
        assert needed in seen


def test_the_dashboard_is_a_grafana_model() -> None:
    model = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert model["title"]
    assert model["uid"]
    assert isinstance(model["schemaVersion"], int)
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert [target["refId"] for target in panel["targets"]]


def test_the_checker_catches_a_misspelt_metric_and_bad_promql(registry_names: set[str]) -> None:
    assert selectors("rate(lore_retrievals_totl[5m])") - registry_names == {"lore_retrievals_totl"}
    with pytest.raises(ValueError, match="parenthesis"):
        selectors("sum(rate(lore_retrievals_total[5m])")


def test_every_alert_links_a_runbook_that_names_it() -> None:
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        path = RUNBOOKS / url.rsplit("/docs/runbooks/", 1)[1]
        assert path.is_file(), f"{rule['alert']}: {url} is not in docs/runbooks/"
        page = frontmatter.load(path)
        assert rule["alert"] in page["alerts"]
        # The runbook style of examples/runbooks/.
        headings = re.findall(r"^## (.+)$", page.content, flags=re.M)
        assert headings[:4] == ["Meaning", "Impact", "Diagnosis", "Mitigation"], path.name


async def test_lore_finds_the_runbook_of_each_of_its_own_alerts(tmp_path: Path) -> None:
    """docs/runbooks indexed as a source: ``runbook_for_alert`` answers each shipped alert,
    from its labels and annotations as Alertmanager sends them, with its own runbook."""
    from lore.alerts.tool import RunbookForAlert
    from lore.config import load_settings
    from lore.resolve import build_knowledge_search
    from lore.sync import run_sync

    config = tmp_path / "lore.toml"
    config.write_text(
        'db_path = "lore.db"\naudit_path = "audit.jsonl"\nembedder = "hashing"\n[vault]\nenabled = false\n'
        f'[[sources]]\nname = "lore-runbooks"\ntype = "filesystem"\npath = "{RUNBOOKS}"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    settings = load_settings(config)
    assert (await asyncio.to_thread(run_sync, settings)).ok  # run_sync has its own event loop
    search = build_knowledge_search(settings)
    assert search is not None
    tool = RunbookForAlert(search)
    for rule in rules():
        labels = {"alertname": rule["alert"], **rule.get("labels", {})}
        answer = await tool.run({"labels": labels, "annotations": rule["annotations"]}, principal=LOCAL)
        assert answer.error is None, answer.error
        top = answer.result.passages[0]
        expected = rule["annotations"]["runbook_url"].rsplit("/", 1)[1]
        assert top.uri == f"file://lore-runbooks/{expected}", rule["alert"]
