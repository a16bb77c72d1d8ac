"""`lore mcp` end to end with the MCP SDK's own client: stdio (a real `lore mcp`
subprocess) and streamable HTTP on 127.0.0.1, over a real SQLite index."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

import agent_corpus
from lore.access import LOCAL
from lore.config import load_settings
from lore.mcp_server import build_server
from lore.resolve import build_knowledge_search
from lore.tool.core import (
    INPUT_SCHEMA,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    UNTRUSTED_NOTICE,
    KnowledgeSearch,
)
from test_rerankers import RerankServer, score_by_keyword

LORE = Path(sys.executable).with_name("lore")

RUNBOOKS = {
    "etcd-no-leader.md": (
        "---\ntitle: etcd has no leader\ntags: etcd\n---\n# etcd has no leader\n\n## Meaning\n\n"
        "The alert etcdNoLeader fires when a member reports no leader.\n\n## Mitigation\n\n"
        "Check member health with `etcdctl endpoint health` and restart the lagging member.\n"
    ),
    "kafka-lag.md": (
        "---\ntitle: Kafka consumer lag\ntags: kafka\n---\n# Kafka consumer lag\n\n## Diagnosis\n\n"
        "Lag on payments-consumer-group grows when a consumer is stuck in a rebalance.\n"
    ),
}


def write_config(root: Path, *, backend: str = "sqlite") -> Path:
    return agent_corpus.write_config(root, RUNBOOKS, backend=backend)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agent_corpus.synced_config(tmp_path_factory.mktemp("mcp"), RUNBOOKS)


def audit_lines(config: Path) -> list[dict[str, Any]]:
    return agent_corpus.audit_entries(config)


def server_env(**extra: str) -> dict[str, str]:
    """The child's environment: no LORE_* leaking in from the test runner."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LORE_")}
    env.update(extra)
    return env


def stdio_params(config: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(LORE), args=["--config", str(config), "mcp"], cwd=str(config.parent), env=server_env()
    )


async def check_client(client: Client, config: Path) -> None:
    """What every transport must offer: the search tool (then runbook_for_alert, built on
    the same chain), the core's contract, both contents."""
    tools = (await client.list_tools()).tools
    assert [tool.name for tool in tools] == [TOOL_NAME, "runbook_for_alert", "knowledge_feedback"]
    assert tools[0].description == TOOL_DESCRIPTION
    assert tools[0].input_schema == INPUT_SCHEMA
    assert tools[0].annotations is not None
    assert tools[0].annotations.read_only_hint

    before = len(audit_lines(config))
    result = await client.call_tool(TOOL_NAME, {"query": "etcdNoLeader", "top_k": 2})
    assert not result.is_error
    structured = result.structured_content
    assert structured is not None
    assert structured["error"] is None
    top = structured["passages"][0]
    assert top["uri"].endswith("etcd-no-leader.md")
    assert top["title"] == "etcd has no leader"
    assert {"revision", "updated_at", "age_days", "stale", "score", "chunk_id"} <= top.keys()
    assert structured["metadata"]["engine"] == "sqlite"
    # structuredContent carries no fence or preamble, so it says what its passages are.
    assert structured["untrusted"] is True
    assert structured["notice"] == UNTRUSTED_NOTICE
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert "[1] etcd has no leader" in text.text
    assert "etcd-no-leader.md" in text.text
    assert len(audit_lines(config)) == before + 1


async def test_stdio_lists_and_calls_the_tool(config: Path) -> None:
    async with Client(stdio_params(config)) as client:
        await check_client(client, config)
        assert audit_lines(config)[-1]["principal"]  # the OS user who launched the server

        # Bad arguments are a tool error the model can read, not a protocol failure.
        result = await client.call_tool(TOOL_NAME, {"query": "etcd", "top_k": 0})
        assert result.is_error
        assert result.structured_content is not None
        assert "top_k" in result.structured_content["error"]
        assert isinstance(result.content[0], TextContent)
        assert "top_k" in result.content[0].text

        # 2.0 is an integer to JSON Schema, so to the advertised schema: it is served.
        result = await client.call_tool(TOOL_NAME, {"query": "etcdNoLeader", "top_k": 2.0})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["error"] is None
        # 2.5 is not; the error names the schema's own bounds.
        result = await client.call_tool(TOOL_NAME, {"query": "etcdNoLeader", "top_k": 2.5})
        assert result.is_error
        assert isinstance(result.content[0], TextContent)
        assert "top_k: must be a whole number from 1 to 50" in result.content[0].text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def mcp_http(config: Path) -> Iterator[str]:
    """A real ``lore mcp --http`` on an ephemeral port: its base url, once it listens."""
    port = free_port()
    process = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp", "--http", "--port", str(port)],
        cwd=config.parent,
        env=server_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # readiness only: how long start-up takes is not asserted
        while True:
            if process.poll() is not None:
                pytest.fail(f"lore mcp --http exited {process.returncode}: {process.stderr.read()}")  # type: ignore[union-attr]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("lore mcp --http did not start listening")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def http_server(config: Path) -> Iterator[str]:
    with mcp_http(config) as url:
        yield f"{url}/mcp"


async def test_streamable_http_lists_and_calls_the_tool(config: Path, http_server: str) -> None:
    async with Client(http_server) as client:
        await check_client(client, config)


async def test_unknown_tool_is_an_error_result(config: Path) -> None:
    search = build_knowledge_search(load_settings(config))
    assert isinstance(search, KnowledgeSearch)
    async with Client(build_server(search, principal=LOCAL)) as client:  # in-process: same server object
        result = await client.call_tool("delete_everything", {})
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    assert "knowledge_search" in result.content[0].text


def test_backend_none_refuses_to_start(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    completed = subprocess.run(
        [str(LORE), "--config", str(config), "mcp"],
        cwd=tmp_path,
        env=server_env(LORE_BACKEND="none", COLUMNS="200"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    assert completed.stdout == ""  # nothing that an MCP client could mistake for a server
    assert 'backend is "none"' in completed.stderr
    assert "Traceback" not in completed.stderr


async def test_stdio_uses_the_configured_reranker(config: Path) -> None:
    """reranker settings reach `lore mcp` (here from the environment): the loopback
    Cohere-format server is asked, and the answer says it reranked."""
    with RerankServer(score_by_keyword) as reranker:
        params = StdioServerParameters(
            command=str(LORE),
            args=["--config", str(config), "mcp"],
            cwd=str(config.parent),
            env=server_env(
                LORE_RERANKER="http", LORE_RERANKER_URL=reranker.url, LORE_RERANKER_MODEL="rr-test"
            ),
        )
        async with Client(params) as client:
            result = await client.call_tool(TOOL_NAME, {"query": "etcd leader", "top_k": 1})
    assert not result.is_error
    assert result.structured_content is not None
    metadata = result.structured_content["metadata"]
    assert (metadata["reranker"], metadata["reranked"]) == ("http:rr-test", True)
    assert result.structured_content["passages"][0]["uri"].endswith("etcd-no-leader.md")
    assert len(reranker.requests) == 1
    assert reranker.requests[0][2]["model"] == "rr-test"


# -- bad input and a missing extra ----------------------------------------------------------


def test_without_the_mcp_extra_http_is_one_line_naming_it(config: Path) -> None:
    # The real CLI entry point in a child where importing the SDK fails as when it is absent.
    # Only --http needs the SDK; stdio without it is test_stdio_never_imports_the_sdk.
    program = "import sys; sys.modules['mcp'] = None; sys.argv[0] = 'lore'; from lore.cli import main; main()"
    result = subprocess.run(
        [sys.executable, "-c", program, "--config", str(config), "mcp", "--http"],
        cwd=config.parent, env=server_env(), capture_output=True, text=True, timeout=60,
    )

    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: this feature needs the optional package 'mcp': pip install 'lore-sre[mcp]'\n"
    )


def rpc_line(server: subprocess.Popen[bytes], raw: bytes) -> dict[str, Any]:
    """Write one raw JSON-RPC line; the reply, read with a deadline (no reply fails the test)."""
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write(raw + b"\n")
    server.stdin.flush()
    ready, _, _ = select.select([server.stdout], [], [], 30)
    assert ready, "no reply from lore mcp"
    reply: dict[str, Any] = json.loads(server.stdout.readline())
    return reply


def test_stdio_a_lone_surrogate_gets_an_error_result_and_an_audit_record(config: Path) -> None:
    server = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp"], cwd=config.parent, env=server_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        assert rpc_line(server, json.dumps(initialize).encode())["id"] == 1
        assert server.stdin is not None
        server.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        before = len(audit_lines(config))

        # Valid JSON (RFC 8259 allows the escape) that the SDK's parser rejects.
        reply = rpc_line(server, b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":'
                                 b'{"name":"knowledge_search","arguments":{"query":"etcd \\ud800 leader"}}}')
        after = audit_lines(config)
        # The server still answers the next call.
        good = rpc_line(server, b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":'
                                b'{"name":"knowledge_search","arguments":{"query":"etcdNoLeader"}}}')
    finally:
        server.terminate()
        server.communicate(timeout=30)

    assert reply["id"] == 2
    assert reply["result"]["isError"] is True
    assert "not valid Unicode text" in reply["result"]["content"][0]["text"]
    assert len(after) == before + 1
    assert after[-1]["error"].startswith("invalid arguments: query: not valid Unicode text")
    assert after[-1]["query"] == "etcd \ufffd leader"
    assert good["id"] == 3
    assert good["result"]["isError"] is False


# -- the hand-written stdio loop, byte for byte (lore.mcp_stdio) -----------------------------

#: Modules the stdio server must never import: the SDK and the stack it brings.
SDK_MODULES = ("mcp", "mcp_types", "anyio", "starlette", "uvicorn", "sse_starlette")


def exchange(
    config: Path, lines: list[bytes], *, program: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """Every reply to ``lines`` written at once, read until the server exits on EOF."""
    command = [str(LORE)] if program is None else [sys.executable, "-c", program]
    completed = subprocess.run(
        [*command, "--config", str(config), "mcp"], cwd=config.parent, env=server_env(),
        input=b"".join(line + b"\n" for line in lines), capture_output=True, timeout=120,
    )
    assert b"Traceback" not in completed.stderr, completed.stderr
    replies = [json.loads(line) for line in completed.stdout.splitlines()]
    return replies, completed.returncode


def initialize(version: str, request_id: int = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }).encode()


INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def test_stdio_ping_unknown_method_and_notifications(config: Path) -> None:
    replies, code = exchange(config, [
        initialize("2025-06-18"),
        INITIALIZED,
        b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}',
        b'{"jsonrpc":"2.0","method":"notifications/whatever"}',
        b'{"jsonrpc":"2.0","id":2,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":"three","method":"prompts/list"}',
        b"",  # a blank line is no message
        b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"delete_everything","arguments":{}}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"arguments":{}}}',
    ])

    assert code == 0  # EOF on stdin: a clean exit
    # Notifications got no reply: the replies are exactly the five requests', in order.
    assert [reply["id"] for reply in replies] == [1, 2, "three", 4, 5]
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert replies[2] == {"jsonrpc": "2.0", "id": "three",
                          "error": {"code": -32601, "message": "Method not found", "data": "prompts/list"}}
    # An unknown tool is a tool error result, as the SDK server answers it.
    assert replies[3]["result"] == {"content": [{"type": "text", "text": (
        "unknown tool 'delete_everything'; this server offers 'knowledge_search', "
        "'runbook_for_alert', 'knowledge_feedback'")}], "isError": True}
    assert replies[4]["error"]["code"] == -32602


def test_stdio_invalid_json_and_bytes_get_an_error_not_a_crash(config: Path) -> None:
    replies, code = exchange(config, [
        initialize("2025-06-18"),
        b'{"jsonrpc":"2.0","id":2,"method":',  # cut short
        b"\xff\xfe not even text",
        b"[]",  # a batch: not part of MCP since 2025-06-18
        b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"note":"\xff"}}',  # not UTF-8 inside a string
    ])

    assert code == 0
    parse_error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    assert replies[1:3] == [parse_error, parse_error]
    invalid = {"code": -32600, "message": "Invalid Request"}
    assert replies[3] == {"jsonrpc": "2.0", "id": None, "error": invalid}
    assert replies[4] == {"jsonrpc": "2.0", "id": 3, "result": {}}


@pytest.mark.parametrize(("requested", "served"), [
    ("2024-11-05", "2024-11-05"),  # an old revision the SDK still speaks is accepted as asked
    ("2025-11-25", "2025-11-25"),
    ("1999-01-01", "2025-11-25"),  # unknown: our latest handshake revision, for the client to decide
])
def test_stdio_protocol_version_negotiation(config: Path, requested: str, served: str) -> None:
    replies, _ = exchange(config, [initialize(requested)])

    result = replies[0]["result"]
    assert result["protocolVersion"] == served
    assert result["capabilities"] == {
        "tools": {"listChanged": False},
        # the skill files, and the MCP Skills extension over them (tests/test_skills.py)
        "resources": {"listChanged": False, "subscribe": False},
        "extensions": {"io.modelcontextprotocol/skills": {}},
    }
    assert result["serverInfo"]["name"] == "lore"
    assert "knowledge_search" in result["instructions"]


def test_stdio_modern_era_discover_and_envelope(config: Path) -> None:
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
    replies, _ = exchange(config, [
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": meta}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": meta}).encode(),
        initialize("2025-06-18", request_id=3),  # the era is decided: no handshake now
    ])

    discover = replies[0]["result"]
    assert discover["supportedVersions"] == ["2026-07-28"]
    assert discover["resultType"] == "complete"
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "lore"
    tools = replies[1]["result"]["tools"]
    assert [tool["name"] for tool in tools] == [TOOL_NAME, "runbook_for_alert", "knowledge_feedback"]
    assert tools[0]["inputSchema"] == INPUT_SCHEMA
    assert replies[2]["error"]["code"] == -32600


def test_stdio_never_imports_the_sdk(config: Path) -> None:
    """The CLI entry point with the SDK and its stack made unimportable (as when the
    extra is absent) still initializes and answers a call: nothing on the stdio path
    imports them, which is what keeps spawn-to-first-result short."""
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in SDK_MODULES)
    program = f"import sys; {blocked}; sys.argv[0] = 'lore'; from lore.cli import main; main()"
    replies, code = exchange(config, [
        initialize("2025-06-18"),
        INITIALIZED,
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"knowledge_search",'
        b'"arguments":{"query":"etcdNoLeader","top_k":1}}}',
    ], program=program)

    assert code == 0
    assert replies[1]["id"] == 2
    assert replies[1]["result"]["isError"] is False
    assert replies[1]["result"]["structuredContent"]["passages"][0]["uri"].endswith("etcd-no-leader.md")


def test_stdio_deep_nesting_is_a_parse_error(config: Path) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    replies, code = exchange(config, [deep, b'{"jsonrpc":"2.0","id":2,"method":"ping"}'])

    assert code == 0
    assert replies[0]["error"]["code"] == -32700
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_stdio_an_unwritable_audit_log_fails_the_call_not_the_server(tmp_path: Path) -> None:
    config = agent_corpus.synced_config(tmp_path, RUNBOOKS)
    (tmp_path / "audit.jsonl").mkdir()  # the audit line cannot be appended

    replies, code = exchange(config, [
        initialize("2025-06-18"),
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"knowledge_search",'
        b'"arguments":{"query":"etcdNoLeader"}}}',
        b'{"jsonrpc":"2.0","id":3,"method":"ping"}',
    ])

    assert code == 0
    assert replies[1]["id"] == 2
    result = replies[1]["result"]  # fail closed: no passages without their audit record
    assert result["isError"] is True
    assert result["structuredContent"]["passages"] == []
    assert replies[2] == {"jsonrpc": "2.0", "id": 3, "result": {}}


def test_stdio_a_client_gone_from_stdout_ends_the_server_quietly(config: Path) -> None:
    server = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp"], cwd=config.parent, env=server_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert server.stdout is not None
    server.stdout.close()  # the reply will meet a closed pipe
    _, err = server.communicate(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n', timeout=120)

    assert server.returncode == 0
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err


def test_end_of_input_while_the_model_loads_is_a_clean_exit(tmp_path: Path) -> None:
    """A client that closes stdin at once ended the server while the local model was still
    loading on its warm-up thread, in native code: the interpreter's exit under it aborted
    the process (exit 134, "terminate called without an active exception")."""
    config = tmp_path / "lore.toml"
    config.write_text(
        'backend = "sqlite"\ndb_path = "lore.db"\nembedder = "local"\n\n[vault]\nenabled = false\n'
    )
    completed = subprocess.run(
        [str(LORE), "--config", str(config), "mcp"], cwd=tmp_path, env=server_env(),
        input=b"", capture_output=True, timeout=120,
    )  # fmt: skip
    assert (completed.returncode, completed.stderr) == (0, b"")


def test_stdio_starts_the_secret_detectors_worker_before_the_first_call(config: Path) -> None:
    """Every call's query is scanned by the secret detector; ``lore mcp`` starts its worker
    process as it starts, so the first call does not wait for it to load."""
    import psutil

    server = subprocess.Popen(
        [str(LORE), "--config", str(config), "mcp"], cwd=config.parent, env=server_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert rpc_line(server, initialize("2025-06-18"))["id"] == 1  # the server is serving
        workers = [
            child for child in psutil.Process(server.pid).children()
            if any(part.endswith("secret_worker.py") for part in child.cmdline())
        ]  # fmt: skip
        assert len(workers) == 1
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=60)
        for stream in (server.stdout, server.stderr):
            assert stream is not None
            stream.close()
