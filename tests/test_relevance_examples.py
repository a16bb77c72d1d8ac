"""Answers a team trusts, on the example corpus with the built-in playbook pack indexed
beside it (as ``make run`` indexes it), through the CLI and the MCP server:

- a documented alert is never answered "nothing relevant" (``lore.named``): the runbook
  whose section names ``KafkaConsumerLagHigh`` is shown, with its confidence, by ``lore
  alert``, ``runbook_for_alert``, ``lore search`` and ``knowledge_search``, whatever
  ``min_confidence`` says; an identifier nothing names is still withheld;
- the team's own runbook comes before the pack's playbook on the same topic
  (``lore.priority``), and the pack still answers what only it covers.

The hashing embedder keeps the test about the rules, not the model: alert names are
looked up by BM25, and the pack-vs-team searches run in BM25 mode.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

import test_alert
from lore.config import load_settings
from lore.sync import run_sync

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "runbooks"
LORE = Path(sys.executable).with_name("lore")
KAFKA = "file://runbooks/data/kafka-consumer-lag.md"
TEAM_NODE = "file://runbooks/kubernetes/node-not-ready.md"


def write_config(root: Path, *, vault_weight: float | None = None) -> Path:
    vault = "" if vault_weight is None else f"[vault]\nweight = {vault_weight}\n\n"
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "hashing"\naudit_path = "audit.jsonl"\n\n'
        f"{vault}"
        f'[[sources]]\nname = "runbooks"\ntype = "filesystem"\npath = "{EXAMPLES}"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    return config


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = write_config(tmp_path_factory.mktemp("examples"))
    report = run_sync(load_settings(config))
    assert report.ok, report.failures
    return config


def cli_json(config: Path, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> dict[str, Any]:
    code, out, err = test_alert.run_cli(["--config", str(config), *args, "--json"], monkeypatch, capsys)
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


# -- point 1: a named answer is never withheld ------------------------------------------------


def test_lore_alert_by_name_alone_shows_the_section_that_names_it(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(config, ["alert", "--label", "alertname=KafkaConsumerLagHigh"], monkeypatch, capsys)
    assert result["confidence"] != "none"
    assert result["metadata"]["no_match"] is False
    top = result["passages"][0]
    assert (top["uri"], top["section"].split(" › ")[-1]) == (KAFKA, "Meaning")
    assert "mention" in top["evidence"]
    assert top["confidence"] in {"high", "medium"}
    assert top["alerts"] == ["KafkaConsumerLagHigh"]


def test_lore_alert_by_name_is_shown_whatever_min_confidence_says(
    tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    strict = write_config(tmp_path)
    shared = f'db_path = "{config.parent / "lore.db"}"'
    text = strict.read_text(encoding="utf-8").replace('db_path = "lore.db"', shared)
    strict.write_text('min_confidence = "high"\n' + text, encoding="utf-8")
    result = cli_json(strict, ["alert", "--label", "alertname=KafkaConsumerLagHigh"], monkeypatch, capsys)
    assert result["metadata"]["no_match"] is False
    assert result["passages"][0]["uri"] == KAFKA


def test_lore_alert_human_output_names_the_runbook(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = test_alert.run_cli(
        ["--config", str(config), "alert", "--label", "alertname=KafkaConsumerLagHigh"], monkeypatch, capsys
    )
    assert code == 0, err
    assert "confidence: none" not in out
    assert "no matching knowledge" not in out
    assert KAFKA in out


@pytest.mark.parametrize("minimum", ["low", "high"])
def test_lore_search_of_an_alert_name_is_never_withheld(
    config: Path, minimum: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(
        config, ["search", "KafkaConsumerLagHigh", "--min-confidence", minimum], monkeypatch, capsys
    )
    assert result["metadata"]["no_match"] is False
    assert result["passages"][0]["uri"] == KAFKA


def test_an_identifier_nothing_names_is_still_withheld(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The look-alike: an alert-shaped name no page holds gets no free pass."""
    result = cli_json(
        config, ["search", "FooBarQuotaExceeded", "--min-confidence", "high"], monkeypatch, capsys
    )
    assert result["metadata"]["no_match"] is True
    assert result["passages"] == []


async def test_mcp_runbook_for_alert_and_knowledge_search_answer_the_alert_name(config: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    params = StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(config.parent), env=env
    )
    async with Client(params) as client:
        result = await client.call_tool(
            "runbook_for_alert", {"labels": {"alertname": "KafkaConsumerLagHigh"}}
        )
        assert not result.is_error
        data = result.structured_content
        assert data is not None
        assert data["confidence"] != "none"
        assert data["passages"][0]["uri"] == KAFKA

        result = await client.call_tool("runbook_for_alert", {"labels": {"alertname": "KubeNodeNotReady"}})
        data = result.structured_content
        assert data is not None
        assert data["passages"][0]["uri"] == TEAM_NODE

        result = await client.call_tool("knowledge_search", {"query": "KafkaConsumerLagHigh"})
        data = result.structured_content
        assert data is not None
        assert data["metadata"]["no_match"] is False
        assert data["passages"][0]["uri"] == KAFKA


# -- point 2: the team's runbook before the pack's ----------------------------------------------


def test_lore_alert_gives_the_teams_runbook_before_the_packs(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(config, ["alert", "--label", "alertname=KubeNodeNotReady"], monkeypatch, capsys)
    uris = [passage["uri"] for passage in result["passages"]]
    assert uris[0] == TEAM_NODE
    assert any(uri.startswith("vault://lore/kubernetes/") for uri in uris[1:])  # the pack still fills in


def test_lore_search_gives_the_teams_runbook_before_the_packs(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(config, ["search", "redis is out of memory", "--mode", "bm25"], monkeypatch, capsys)
    uris = [passage["uri"] for passage in result["passages"]]
    assert uris[0] == "file://runbooks/data/redis-memory-evictions.md"
    assert "vault://lore/redis/memory-evictions.md" in uris
    scores = [passage["score"] for passage in result["passages"]]
    assert scores == sorted(scores, reverse=True)  # the shown scores are the prioritised ones


def test_the_pack_still_answers_what_only_it_covers(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(
        config,
        ["search", "ERR max number of clients reached from redis", "--mode", "bm25"],
        monkeypatch,
        capsys,
    )
    assert result["passages"][0]["uri"] == "vault://lore/redis/too-many-clients.md"


def test_the_packs_page_the_query_names_passes_a_team_page_that_holds_no_name(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ImagePullBackOff is the pack page's own name (file name, title); the team's
    CrashLoopBackOff runbook, ranked above it on "pod stuck", holds no such name."""
    result = cli_json(
        config, ["search", "pod stuck in ImagePullBackOff: manifest unknown"], monkeypatch, capsys
    )
    uris = list(dict.fromkeys(p["uri"] for p in result["passages"]))
    assert uris[0] == "vault://lore/kubernetes/image-pull-backoff.md"
    assert "file://runbooks/kubernetes/pod-crashloopbackoff.md" in uris  # still shown, below


def test_a_question_how_to_do_an_act_reads_the_procedure_first(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """"how do I shrink it safely?" asks for the pack's journald page's Fixes, not for its
    introduction and Symptoms, which the retriever ranked above them (BM25: this index's
    test embedder reads no meaning)."""
    question = "/var/log/journal is eating the root disk, how do I shrink it safely?"
    result = cli_json(config, ["search", question, "--mode", "bm25"], monkeypatch, capsys)
    first = result["passages"][0]
    assert (first["uri"], first["section"]) == ("vault://lore/linux/journald-disk-usage.md", "Fixes")


def test_an_equal_weight_lets_the_pack_outrank_the_team(
    tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The priority is what orders them: ``[vault] weight = 1`` over the same index puts
    the pack's playbook first for the same question."""
    equal = write_config(tmp_path, vault_weight=1.0)
    text = equal.read_text(encoding="utf-8").replace(
        'db_path = "lore.db"', f'db_path = "{config.parent / "lore.db"}"'
    )
    equal.write_text(text, encoding="utf-8")
    result = cli_json(equal, ["search", "redis is out of memory", "--mode", "bm25"], monkeypatch, capsys)
    assert result["passages"][0]["uri"] == "vault://lore/redis/memory-evictions.md"


# -- point 3: one passage per section, no document taking every slot -----------------------------


def test_lore_search_shows_a_sections_consecutive_chunks_as_one_passage(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = cli_json(config, ["search", "etcd cluster has no leader", "--mode", "bm25"], monkeypatch, capsys)
    passages = result["passages"]
    places = [(p["uri"], p["section"], int(p["chunk_id"].rsplit("#", 2)[1])) for p in passages]
    for uri, section, number in places:  # no two consecutive chunks of one section compete
        assert (uri, section, number + 1) not in places
    assert len({p["uri"] for p in passages}) > 1  # (diversity's rule itself: tests/test_arrange.py)
    scores = [p["score"] for p in passages]
    assert scores == sorted(scores, reverse=True)


# -- point 3: the section the alert text asks for, first ------------------------------------------

URP = "file://runbooks/data/kafka-under-replicated-partitions.md"
KAFKA_ALERT = (
    "[FIRING:1] KafkaConsumerLagHigh payments-consumer-group lag 61234 on payments.authorizations.v2"
)
URP_TEXT = "There are 4 under-replicated partition(s) on broker kafka-2 in cluster payments-prod."


@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
@pytest.mark.parametrize(("query", "uri"), [(KAFKA_ALERT, KAFKA), (URP_TEXT, URP)])
def test_lore_search_of_alert_text_shows_what_the_alert_means_first(
    config: Path,
    query: str,
    uri: str,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A notification, or an alert's description with no name (a count and a component),
    asks what is happening: the runbook's Meaning comes before its Impact, Diagnosis and
    Mitigation, which repeat the alert's words."""
    result = cli_json(config, ["search", query, "--mode", mode], monkeypatch, capsys)
    first = result["passages"][0]
    assert (first["uri"], first["section"].rsplit(" › ", 1)[-1]) == (uri, "Meaning")
    scores = [p["score"] for p in result["passages"]]
    assert scores == sorted(scores, reverse=True)


def test_lore_search_of_a_fix_question_still_shows_mitigation_first(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The look-alike: the alert's name in a question that asks for the fix."""
    result = cli_json(
        config,
        ["search", "KafkaConsumerLagHigh is firing, how do I bring the consumer lag down?", "--mode", "bm25"],
        monkeypatch,
        capsys,
    )
    first = result["passages"][0]
    assert (first["uri"], first["section"].rsplit(" › ", 1)[-1]) == (KAFKA, "Mitigation")


def test_a_page_named_by_the_alert_leads_but_the_packs_name_does_not_overrule_the_team(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``KubeNodeNotReady`` is an ``alerts:`` entry of the pack's playbook and only a mention
    in the team's node-not-ready.md: the team's page stays first; the pack's named page
    comes before the pack's other pages."""
    result = cli_json(
        config,
        ["search", "[FIRING:1] KubeNodeNotReady node ip-10-2-3-4 has been unready for more than 15 minutes"],
        monkeypatch,
        capsys,
    )
    uris = list(dict.fromkeys(p["uri"] for p in result["passages"]))
    assert uris[0] == TEAM_NODE
    pack = [uri for uri in uris if uri.startswith("vault://")]
    assert pack
    assert pack[0] == "vault://lore/kubernetes/node-not-ready.md"


async def test_mcp_knowledge_search_of_a_notification_gives_the_meaning_first(config: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    params = StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(config.parent), env=env
    )
    async with Client(params) as client:
        result = await client.call_tool("knowledge_search", {"query": KAFKA_ALERT})
        data = result.structured_content
        assert data is not None
        first = data["passages"][0]
        assert (first["uri"], first["section"].rsplit(" › ", 1)[-1]) == (KAFKA, "Meaning")
