"""Requests the MCP SDK's stdio transport cannot parse, recovered so that they get a reply.

JSON allows ``"\\ud800"``, a lone surrogate escape, but pydantic's JSON parser (which the
SDK reads each stdin line with) rejects it, and the SDK then drops the line: the client
gets no reply and the tool core never sees the call, so nothing is audited either. Such a
line is parsed here again with the standard library, which keeps the lone surrogate, and
validated from Python objects instead. In a ``tools/call`` the arguments keep it, so the
tool core refuses them with an error result and writes its audit record; anywhere else
(an id, a client name) it becomes U+FFFD, so that the reply can be encoded.
"""

from __future__ import annotations

import json
import re
from types import TracebackType
from typing import Any, Self

import mcp_types
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

_SURROGATE = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item) for key, item in value.items()}
    return value


def recover(error: Exception) -> SessionMessage | None:
    """The message the SDK failed to parse, when its only fault is a lone surrogate."""
    if not isinstance(error, ValidationError):
        return None
    details = error.errors()
    if len(details) != 1 or details[0]["type"] != "json_invalid" or not isinstance(details[0]["input"], str):
        return None
    try:
        message = json.loads(details[0]["input"])
    except ValueError:
        return None  # truly not JSON: the SDK's own handling stands
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    arguments = params.get("arguments") if isinstance(params, dict) else None
    message = _without_surrogates(message)
    if message.get("method") == "tools/call" and isinstance(arguments, dict):
        message["params"]["arguments"] = arguments  # for the tool core to refuse and audit
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_python(message, by_name=False))
    except ValidationError:
        return None


class RecoveringReadStream:
    """The transport's read stream, with each recoverable parse failure replaced by the
    message it failed to parse (see the module docstring)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        # The SDK restores the sender's contextvars from here (``_context_streams``).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _recovered(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return _recovered(await self._inner.__anext__())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> bool | None:
        await self.aclose()
        return None


def _recovered(item: SessionMessage | Exception) -> SessionMessage | Exception:
    return (recover(item) or item) if isinstance(item, Exception) else item
