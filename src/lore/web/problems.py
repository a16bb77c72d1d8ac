"""Errors as RFC 9457 problem documents (``application/problem+json``), never a traceback.

Routes raise ``Problem``; the handlers installed by ``install`` also turn the framework's
own 404/405/422, a ``LoreError`` and any unexpected exception into a problem document,
so every error a client sees has the same shape and a message meant for a person.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lore.errors import BackendUnavailableError, ConfigError, IndexLockedError, LoreError

logger = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
#: ``Retry-After`` (seconds) of a write refused because another writer holds the index.
LOCKED_RETRY_AFTER_S = 10


class Problem(Exception):
    def __init__(
        self,
        status: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})


def problem_response(
    status: int,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> JSONResponse:
    body: dict[str, object] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        **dict(extra or {}),
    }
    return JSONResponse(body, status_code=status, headers=dict(headers or {}), media_type=PROBLEM_JSON)


def problem_bytes(status: int, detail: str) -> bytes:
    """The body ``problem_response`` sends, for middleware that answers before FastAPI (the
    body limit): the same title and the same compact JSON."""
    body = {"type": "about:blank", "title": HTTPStatus(status).phrase, "status": status, "detail": detail}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


async def json_body(request: Request) -> Any:  # as json.loads: each tool checks its shape
    """The request body decoded as JSON (None when empty), or a 400 problem. Nesting
    deeper than the parser's recursion limit (``[[[[...`` well under the body limit) is
    bad input too, not the RecursionError of a 500. A body declared as something else
    (``curl -d`` sends a form's type, a browser's cross-site form ``text/plain``) is a 415
    saying what to send; a body without a Content-Type is read as JSON."""
    declared = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if declared and declared != "application/json" and not declared.endswith("+json"):
        raise Problem(
            415, f"the body must be JSON sent with Content-Type: application/json, not {declared!r}"
        )
    try:
        return json.loads(await request.body() or b"null")
    except ValueError as err:  # UnicodeDecodeError included
        raise Problem(400, f"the body is not JSON: {err}") from err
    except RecursionError:
        raise Problem(400, "the body is not JSON lore reads: nested too deeply") from None


def _validation_detail(err: RequestValidationError) -> str:
    parts = []
    for error in err.errors()[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def install(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return problem_response(exc.status, exc.detail, headers=exc.headers, extra=exc.extra)

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"no route {request.url.path}"
        elif exc.status_code == 405:
            detail = f"{request.method} is not allowed on {request.url.path}"
        return problem_response(exc.status_code, detail, headers=exc.headers)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem_response(422, _validation_detail(exc))

    async def on_lore(request: Request, exc: Exception) -> JSONResponse:
        # An unreachable index is the server's temporary trouble, not a bug: 503. So is an
        # index another writer holds (a sync, another replica's upload, `lore sync`): 503
        # with when to try again, in one line.
        if isinstance(exc, IndexLockedError):
            detail = " ".join(str(exc).split())
            return problem_response(503, detail, headers={"Retry-After": str(LOCKED_RETRY_AFTER_S)})
        status = 500
        if isinstance(exc, ConfigError):
            status = 400
        elif isinstance(exc, BackendUnavailableError):
            status = 503
        return problem_response(status, str(exc))

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path)
        return problem_response(500, f"the server failed unexpectedly ({type(exc).__name__}); see its log")

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(LoreError, on_lore)
    app.add_exception_handler(Exception, on_unexpected)
