"""OpenAI function calling: the schema, the call handler, and one tool-call round trip
with the real openai client against a loopback fake of the Chat Completions API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import agent_corpus
from agent_corpus import ETCD_RUNBOOK
from lore.config import load_settings
from lore.integrations.openai_tools import handle_openai_tool_call, openai_tool_schema, openai_tools
from lore.resolve import build_knowledge_search
from lore.tool.core import (
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    UNTRUSTED_NOTICE,
    KnowledgeSearch,
)
from optional_extras import require_extra

RUNBOOKS = {"etcd-no-leader.md": ETCD_RUNBOOK}


def write_config(root: Path, *, backend: str = "sqlite") -> Path:
    return agent_corpus.write_config(root, RUNBOOKS, backend=backend)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_corpus.synced_config(tmp_path_factory.mktemp("openai"), RUNBOOKS)


@pytest.fixture
def search(config: Path) -> KnowledgeSearch:
    search = build_knowledge_search(load_settings(config))
    assert search is not None
    return search


def audit(config: Path) -> list[dict[str, Any]]:
    return agent_corpus.audit_entries(config)


def test_schema_is_the_core_contract() -> None:
    schema = openai_tool_schema()
    assert schema == {
        "type": "function",
        "function": {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": INPUT_SCHEMA},
    }
    schema["function"]["parameters"]["properties"].clear()
    assert INPUT_SCHEMA["properties"], "callers mutating their copy must not change the core's schema"


def test_openai_tools_follows_the_backend(config: Path, tmp_path: Path) -> None:
    assert openai_tools(load_settings(config)) == [openai_tool_schema()]
    assert openai_tools(load_settings(write_config(tmp_path, backend="none"))) == []


async def test_text_result_cites_passages(search: KnowledgeSearch, config: Path) -> None:
    content = await handle_openai_tool_call(search, '{"query": "etcdNoLeader", "top_k": 1}', principal="bot")
    assert "[1] etcd has no leader" in content
    assert "untrusted" in content.lower()
    assert audit(config)[-1]["principal"] == "bot"


async def test_json_result_is_the_structured_result(search: KnowledgeSearch) -> None:
    content = await handle_openai_tool_call(search, '{"query": "etcdNoLeader"}', output="json")
    result = json.loads(content)
    assert result["error"] is None
    assert result["passages"][0]["uri"].endswith("etcd-no-leader.md")
    # The model reading the JSON is told, in the JSON, what the passages are.
    assert result["untrusted"] is True
    assert result["notice"] == UNTRUSTED_NOTICE


async def test_malformed_arguments_are_an_error_the_model_can_read(search: KnowledgeSearch) -> None:
    fake_secret = "ghp_" + "x" * 36
    content = await handle_openai_tool_call(search, '{"query": "' + fake_secret)
    assert content.startswith("error: knowledge_search arguments are not valid JSON")
    assert fake_secret not in content
    structured = json.loads(await handle_openai_tool_call(search, "[1, 2]", output="json"))
    assert structured == {
        "untrusted": True,
        "notice": UNTRUSTED_NOTICE,
        "error": "knowledge_search arguments must be a JSON object",
        "passages": [],
    }


async def test_invalid_arguments_go_through_the_core(search: KnowledgeSearch, config: Path) -> None:
    before = len(audit(config))
    content = await handle_openai_tool_call(search, '{"query": "etcd", "verbose": true}')
    assert "invalid arguments" in content
    assert "verbose" in content
    assert len(audit(config)) == before + 1  # audited like any other call


class FakeChatCompletions(BaseHTTPRequestHandler):
    """``POST /v1/chat/completions`` as documented: the first turn asks for a
    knowledge_search call, the turn carrying the tool message gets a final answer."""

    requests: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append(body)
        if any(message["role"] == "tool" for message in body["messages"]):
            message: dict[str, Any] = {"role": "assistant", "content": "Restart the lagging member [1]."}
            finish = "stop"
        else:
            arguments = json.dumps({"query": "etcdNoLeader", "top_k": 1})
            function = {"name": TOOL_NAME, "arguments": arguments}
            call = {"id": "call_1", "type": "function", "function": function}
            message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        payload = json.dumps(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_openai() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (FakeChatCompletions,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1", requests
    finally:
        server.shutdown()
        thread.join()


async def test_round_trip_with_the_openai_client(
    search: KnowledgeSearch, config: Path, fake_openai: tuple[str, list[dict[str, Any]]]
) -> None:
    openai = require_extra("openai", "dev")
    base_url, requests = fake_openai
    client = openai.AsyncOpenAI(base_url=base_url, api_key="fake-" + "loopback-" + "key", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "etcd has no leader, what now?"}]
    tools = openai_tools(load_settings(config))

    first = await client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
    call = first.choices[0].message.tool_calls[0]
    content = await handle_openai_tool_call(search, call.function.arguments, principal="openai-agent")
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": content},
    ]
    final = await client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
    await client.close()

    assert requests[0]["tools"] == [openai_tool_schema()]
    sent_back = requests[1]["messages"][-1]
    assert sent_back["role"] == "tool"
    assert "[1] etcd has no leader" in sent_back["content"]
    assert final.choices[0].message.content == "Restart the lagging member [1]."
    assert audit(config)[-1]["principal"] == "openai-agent"
