"""The Google ADK adapter: declaration, run_async with a real ToolContext, and a whole
agent turn against a loopback fake of the Gemini API (the only fake: Gemini is a remote
SaaS; ADK, google-genai's client and lore are the real code)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from optional_extras import require_extra

require_extra("google.adk", "adk")

from google.adk.agents.invocation_context import InvocationContext
from google.adk.agents.llm_agent import LlmAgent
from google.adk.models.google_llm import Gemini
from google.adk.runners import InMemoryRunner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.retrieval.base_retrieval_tool import BaseRetrievalTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

import agent_corpus
from agent_corpus import ETCD_RUNBOOK
from lore.config import load_settings
from lore.integrations.adk import KnowledgeSearchTool, adk_tools
from lore.resolve import build_knowledge_search
from lore.tool.core import (
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    UNTRUSTED_NOTICE,
    KnowledgeSearch,
)

APP = "lore-test"
USER = "oncall-alice"

RUNBOOKS = {"etcd-no-leader.md": ETCD_RUNBOOK}


def write_config(root: Path, *, backend: str = "sqlite") -> Path:
    return agent_corpus.write_config(root, RUNBOOKS, backend=backend)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_corpus.synced_config(tmp_path_factory.mktemp("adk"), RUNBOOKS)


@pytest.fixture
def search(config: Path) -> KnowledgeSearch:
    search = build_knowledge_search(load_settings(config))
    assert search is not None
    return search


def last_audit(config: Path) -> dict[str, Any]:
    return agent_corpus.audit_entries(config)[-1]


async def tool_context(user_id: str = USER) -> ToolContext:
    """A real ToolContext over an in-memory session, as ADK's runner builds one."""
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=user_id)
    invocation = InvocationContext(
        invocation_id="inv-1",
        agent=LlmAgent(name="oncall", model="gemini-2.5-flash"),
        session=session,
        session_service=sessions,
    )
    return ToolContext(invocation, function_call_id="call-1")


def test_tool_is_a_retrieval_tool_with_the_core_contract(search: KnowledgeSearch) -> None:
    tool = KnowledgeSearchTool(search)
    assert isinstance(tool, BaseRetrievalTool)
    declaration = tool._get_declaration()
    assert declaration.name == TOOL_NAME
    assert declaration.description == TOOL_DESCRIPTION
    assert declaration.parameters_json_schema == INPUT_SCHEMA


def test_declaration_without_json_schema_feature(
    search: KnowledgeSearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_DISABLE_JSON_SCHEMA_FOR_FUNC_DECL", "1")
    declaration = KnowledgeSearchTool(search)._get_declaration()
    assert declaration.parameters_json_schema is None
    assert declaration.parameters is not None
    assert declaration.parameters.required == ["query"]
    assert set(declaration.parameters.properties or {}) == set(INPUT_SCHEMA["properties"])


async def test_run_async_delegates_with_the_session_user(search: KnowledgeSearch, config: Path) -> None:
    tool = KnowledgeSearchTool(search)
    context = await tool_context()
    result = await tool.run_async(args={"query": "etcdNoLeader", "top_k": 1}, tool_context=context)
    assert result["error"] is None
    assert result["passages"][0]["uri"].endswith("etcd-no-leader.md")
    assert result["untrusted"] is True
    assert result["notice"] == UNTRUSTED_NOTICE
    audit = last_audit(config)
    assert audit["principal"] == USER
    assert audit["query"] == "etcdNoLeader"


async def test_run_async_bad_arguments_return_an_error(search: KnowledgeSearch) -> None:
    result = await KnowledgeSearchTool(search).run_async(args={"top_k": 3}, tool_context=await tool_context())
    assert result["passages"] == []
    assert "query" in result["error"]


def test_adk_tools_is_empty_without_a_corpus(tmp_path: Path) -> None:
    assert adk_tools(load_settings(write_config(tmp_path, backend="none"))) == []


def test_adk_tools_offers_the_tool(config: Path) -> None:
    tools = adk_tools(load_settings(config))
    assert [tool.name for tool in tools] == [TOOL_NAME]


class FakeGemini(BaseHTTPRequestHandler):
    """``models/*:generateContent`` as the Gemini API documents it: first a function call
    to knowledge_search, then, once the function response arrives, a text answer."""

    requests: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "body": body})
        answered = any("functionResponse" in part for c in body["contents"] for part in c.get("parts", []))
        part: dict[str, Any] = (
            {"text": "See runbook [1]."}
            if answered
            else {"functionCall": {"name": TOOL_NAME, "args": {"query": "etcdNoLeader", "top_k": 1}}}
        )
        payload = json.dumps(
            {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}]}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_gemini(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (FakeGemini,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("GOOGLE_API_KEY", "fake-" + "loopback-" + "key")
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)
    try:
        yield f"http://127.0.0.1:{server.server_port}", requests
    finally:
        server.shutdown()
        thread.join()


async def test_agent_turn_calls_the_tool_and_the_model_gets_the_safe_result(
    config: Path, fake_gemini: tuple[str, list[dict[str, Any]]]
) -> None:
    base_url, requests = fake_gemini
    agent = LlmAgent(
        name="oncall",
        model=Gemini(model="gemini-2.5-flash", base_url=base_url),
        tools=[*adk_tools(load_settings(config))],
    )
    runner = InMemoryRunner(agent=agent, app_name=APP)
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    question = types.Content(role="user", parts=[types.Part(text="etcd has no leader, what now?")])
    events = [
        event async for event in runner.run_async(user_id=USER, session_id=session.id, new_message=question)
    ]

    declared = requests[0]["body"]["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == TOOL_NAME
    assert declared["parameters_json_schema"] == INPUT_SCHEMA
    response = next(
        part["functionResponse"]["response"]
        for content in requests[1]["body"]["contents"]
        for part in content.get("parts", [])
        if "functionResponse" in part
    )
    assert response["passages"][0]["uri"].endswith("etcd-no-leader.md")
    assert response["metadata"]["engine"] == "sqlite"
    # What reached the model says the passages are untrusted.
    assert response["untrusted"] is True
    assert last_audit(config)["principal"] == USER
    final = events[-1].content
    assert final is not None
    assert final.parts is not None
    assert final.parts[0].text == "See runbook [1]."
