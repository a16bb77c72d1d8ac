"""The safety chain holds through EVERY entry point, over a real index of planted attacks.

The attack corpus (lore.testing.attacks: instruction overrides, fake role markers, tool-call
imitations, invisible characters, exfiltration links, and fake credentials) is synced into a
real SQLite index. Then each entry point an agent or a person can use (the Python API,
MCP over stdio, the Google ADK tool, OpenAI function calling, the LangChain retriever and
`lore search`) asks for every case's document, and for each answer this checks that:

- the case's document came back, every chunk of it (so the payload went through the path);
- the chain reported the case's finding kind (screening or redaction ran);
- no planted payload is in what the agent received, in any field (nothing unneutralised);
- the audit log gained a line for the call, naming the caller;
- a broad query over the small result cap comes back truncated (the cap ran).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from lore.access import local_user
from lore.cli.search_cmd import os_user as cli_os_user
from lore.config import load_settings
from lore.mcp_server import os_user as mcp_os_user
from lore.resolve import build_knowledge_search, resolve_index
from lore.safety.verdicts import Verdict
from lore.sync import run_sync
from lore.testing.attacks import (
    PlantedCase,
    all_cases,
    injection_cases,
    secret_cases,
    unsafe_payloads,
    write_attack_corpus,
)
from lore.tool.cleaning import PassageCleaner
from lore.tool.core import MAX_TOP_K, KnowledgeSearch
from optional_extras import require_extra

LORE = Path(sys.executable).with_name("lore")
SOURCE = "planted"
#: Small enough that a broad query overflows it, large enough for any single case.
RESULT_CAP_CHARS = 6000
CASES = all_cases()
#: Every case's query word, up to the tool's query length limit (a broad query on purpose).
BROAD_QUERY = " ".join(case.query for case in CASES)[:1_900].rsplit(" ", 1)[0]

#: One entry point call: tool arguments in, whatever the agent receives out.
Ask = Callable[[dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Planted:
    config: Path
    #: Case name -> how many chunks its document was split into.
    chunks: dict[str, int]

    def audit(self) -> list[dict[str, Any]]:
        path = self.config.parent / "audit.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def search(self) -> KnowledgeSearch:
        search = build_knowledge_search(load_settings(self.config))
        assert search is not None
        return search


def case_uri(case: PlantedCase) -> str:
    return f"file://{SOURCE}/planted-{case.name.replace('_', '-')}.md"


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Planted:
    return plant(tmp_path_factory.mktemp("planted"))


def plant(root: Path) -> Planted:
    write_attack_corpus(root / "runbooks")
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "hashing"\naudit_path = "audit.jsonl"\n'
        # Every planted passage must reach the chain: the broad and batched queries cover
        # little of themselves in any one document, which the verdict calls "no match".
        'min_confidence = "none"\n\n'
        f"[safety]\nmax_result_chars = {RESULT_CAP_CHARS}\n\n"
        f'[[sources]]\nname = "{SOURCE}"\ntype = "filesystem"\npath = "runbooks"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    settings = load_settings(config)
    report = run_sync(settings)
    assert report.ok, report.failures
    index = resolve_index(settings)
    assert index is not None
    try:
        held = index.held(SOURCE)
    finally:
        index.close()
    return Planted(config, {case.name: held[case_uri(case)].chunk_count for case in CASES})


def check_entry(
    entry: dict[str, Any], cases: Sequence[PlantedCase], chunks: dict[str, int], who: str | None
) -> None:
    assert entry["error"] is None, entry["error"]
    assert entry["principal"] == who
    returned = [hit["uri"] for hit in entry["results"]]
    for case in cases:
        whole = returned.count(case_uri(case)) == chunks[case.name]
        assert whole, f"{case.name}: its document was not returned whole"
        assert case.kind in entry["safety"], f"{case.name}: chain did not report {case.kind}"


async def check_every_case(planted: Planted, ask: Ask, *, who: str | None, calls_per_ask: int = 1) -> None:
    leaks: list[str] = []
    for case in CASES:
        before = len(planted.audit())
        output = await ask({"query": case.query, "top_k": planted.chunks[case.name] + 2})
        entries = planted.audit()[before:]
        assert len(entries) == calls_per_ask, f"{case.name}: expected {calls_per_ask} audit line(s)"
        for entry in entries:
            check_entry(entry, [case], planted.chunks, who)
        leaks += unsafe_payloads(output)

    before = len(planted.audit())
    output = await ask({"query": BROAD_QUERY, "top_k": MAX_TOP_K})
    entries = planted.audit()[before:]
    assert len(entries) == calls_per_ask
    assert all(entry["truncated"] for entry in entries), "the output cap did not apply"
    leaks += unsafe_payloads(output)

    assert not leaks, "planted payloads reached the agent unneutralised:\n" + "\n".join(leaks)


def test_the_corpus_plants_both_kinds_of_attack() -> None:
    # What the report quotes: "N injection + M secret cases, 0 reached the model".
    assert len(injection_cases()) >= 45
    assert len(secret_cases()) >= 10
    assert len(CASES) >= 60
    assert len(CASES) == len(injection_cases()) + len(secret_cases())
    assert len({case.name for case in CASES}) == len(CASES)
    # docs/agent-tool.md gives the corpus's size as it is
    page = Path(__file__).parents[1] / "docs" / "agent-tool.md"
    docs = " ".join(page.read_text(encoding="utf-8").split())
    assert f"{len(injection_cases())} injection cases" in docs
    assert f"{len(secret_cases())} fake credentials" in docs


class _NoCleaning(PassageCleaner):
    """Every text's verdict is the text itself, nothing found (``clean_many`` is where
    each field's verdict comes from; this cleaner's cache stays empty)."""

    def clean_many(self, texts: Iterable[str]) -> dict[str, Verdict]:
        return {text: (text, ()) for text in texts}


class ChainBypassed(KnowledgeSearch):
    """The control: the real tool with screening and redaction switched off (the cap and
    the audit still run). Only a test builds this."""

    def __init__(self, search: KnowledgeSearch) -> None:
        super().__init__(search.retriever, policy=search.policy, audit=search.audit, events=search.events)
        self._cleaner = _NoCleaning(search.policy)


async def test_control_without_the_chain_every_case_leaks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same corpus, the same checks, the chain bypassed (ingest redaction off at sync,
    screening and redaction off at query time): every case's payloads reach the agent,
    through the Python API and the OpenAI handler alike, so the tests above can fail and a
    0 from them means something."""
    import lore.sync
    from lore.integrations.openai_tools import handle_openai_tool_call

    monkeypatch.setattr(lore.sync, "redact_document", lambda document: document)
    planted = await asyncio.to_thread(plant, tmp_path)  # sync runs its own event loop
    settings = load_settings(planted.config)
    search = build_knowledge_search(settings)
    assert search is not None
    bypassed = ChainBypassed(search)
    for case in CASES:
        arguments = {"query": case.query, "top_k": planted.chunks[case.name] + 2}
        result = await bypassed.run(arguments, principal=local_user("control"))
        assert result.error is None
        assert len(unsafe_payloads(result, [case])) == len(case.payloads), case.name
        text = await handle_openai_tool_call(bypassed, json.dumps(arguments), principal="control")
        assert unsafe_payloads(text, [case]), case.name


async def test_python_api(planted: Planted) -> None:
    search = planted.search()

    async def ask(arguments: dict[str, Any]) -> Any:
        return await search.run(arguments, principal=local_user("python-api"))

    await check_every_case(planted, ask, who="python-api")


def child_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update(extra)
    return env


async def test_mcp_stdio(planted: Planted) -> None:
    params = StdioServerParameters(
        command=str(LORE),
        args=["--config", str(planted.config), "mcp"],
        cwd=str(planted.config.parent),
        env=child_env(),
    )
    async with Client(params) as client:

        async def ask(arguments: dict[str, Any]) -> Any:
            result = await client.call_tool("knowledge_search", arguments)
            assert not result.is_error
            texts = [block.text for block in result.content if isinstance(block, TextContent)]
            return {"structured": result.structured_content, "text": texts}

        # stdio has no authenticated client: the OS user who launched the server is the caller.
        await check_every_case(planted, ask, who=mcp_os_user())


async def test_google_adk_tool(planted: Planted) -> None:
    require_extra("google.adk", "adk")
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.agents.llm_agent import LlmAgent
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.tool_context import ToolContext

    from lore.integrations.adk import KnowledgeSearchTool

    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="lore-safety", user_id="adk-user")
    invocation = InvocationContext(
        invocation_id="inv-safety",
        agent=LlmAgent(name="oncall", model="gemini-2.5-flash"),
        session=session,
        session_service=sessions,
    )
    context = ToolContext(invocation, function_call_id="call-safety")
    tool = KnowledgeSearchTool(planted.search())

    async def ask(arguments: dict[str, Any]) -> Any:
        return await tool.run_async(args=arguments, tool_context=context)

    await check_every_case(planted, ask, who="adk-user")


async def test_openai_function_calling(planted: Planted) -> None:
    from lore.integrations.openai_tools import handle_openai_tool_call

    search = planted.search()

    async def ask(arguments: dict[str, Any]) -> Any:
        call = json.dumps(arguments)
        text = await handle_openai_tool_call(search, call, principal="openai-agent")
        structured = await handle_openai_tool_call(search, call, principal="openai-agent", output="json")
        return [text, json.loads(structured)]

    await check_every_case(planted, ask, who="openai-agent", calls_per_ask=2)


async def test_langchain_retriever(planted: Planted) -> None:
    require_extra("langchain_core", "langchain")
    from lore.integrations.langchain import KnowledgeSearchRetriever

    search = planted.search()

    async def ask(arguments: dict[str, Any]) -> Any:
        retriever = KnowledgeSearchRetriever(
            search=search, principal="langchain-agent", top_k=arguments["top_k"]
        )
        documents = await retriever.ainvoke(arguments["query"])
        return [{"page_content": doc.page_content, "metadata": doc.metadata} for doc in documents]

    await check_every_case(planted, ask, who="langchain-agent")


#: Places left in each CLI search beyond its batch's chunks.
CLI_SLACK = 10


def batches(planted: Planted) -> Iterator[list[PlantedCase]]:
    """Groups of cases whose documents fit in one search with room to spare (the planted
    pages share their template, so in hybrid mode a page outside the batch can take a place)."""
    batch: list[PlantedCase] = []
    for case in CASES:
        if batch and sum(planted.chunks[c.name] for c in [*batch, case]) > MAX_TOP_K - CLI_SLACK:
            yield batch
            batch = []
        batch.append(case)
    if batch:
        yield batch


def lore_search(planted: Planted, query: str, top_k: int, *flags: str, **env: str) -> str:
    completed = subprocess.run(
        [str(LORE), "--config", str(planted.config), "search", query, "--top-k", str(top_k), *flags],
        cwd=planted.config.parent,
        # A wide terminal, so no payload is split across wrapped lines and missed.
        env=child_env(COLUMNS="100000", **env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_cli_search(planted: Planted) -> None:
    """A subprocess per search is slow, so the CLI asks for many cases at once, with the
    cap lifted (LORE_SAFETY__MAX_RESULT_CHARS) so every case document is returned; one
    more search under the configured cap checks the cap."""
    who = cli_os_user()
    leaks: list[str] = []
    for batch in batches(planted):
        query = " ".join(case.query for case in batch)
        top_k = sum(planted.chunks[case.name] for case in batch) + CLI_SLACK
        for flags in (["--json"], []):
            before = len(planted.audit())
            stdout = lore_search(planted, query, top_k, *flags, LORE_SAFETY__MAX_RESULT_CHARS="10000000")
            entries = planted.audit()[before:]
            assert len(entries) == 1
            assert not entries[0]["truncated"]
            check_entry(entries[0], batch, planted.chunks, who)
            leaks += unsafe_payloads(json.loads(stdout) if flags else stdout)

    before = len(planted.audit())
    stdout = lore_search(planted, BROAD_QUERY, MAX_TOP_K)
    assert "output cap reached" in stdout
    assert planted.audit()[before:][0]["truncated"]
    leaks += unsafe_payloads(stdout)

    assert not leaks, "planted payloads reached the terminal unneutralised:\n" + "\n".join(leaks)
