"""The harness of the knowledge page's browser tests (tests/test_page.py): the server the
page is tested against, Debian's chromium driven by Playwright, and the steps the tests
share.

The server comes from ONE fixture, ``served_lore``. Until ``lore serve`` is merged it is the
contract stand-in in tests/web_contract_app.py; swapping in the real server changes only
that fixture (start ``lore serve`` on 127.0.0.1 with a viewer and an editor token, and a
second one with no token for the unauthenticated mode). Without chromium the tests skip
with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from optional_extras import in_ci, require_extra

require_extra("playwright.sync_api", "dev")
require_extra("uvicorn", "mcp")
docx = require_extra("docx", "dev")

import uvicorn  # noqa: E402
from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize, expect, sync_playwright  # noqa: E402

import web_contract_app  # noqa: E402
from lore.access import Role  # noqa: E402

__all__ = ["Browser", "Page", "expect"]  # for tests/test_page.py, after the checks above

# Two cores shared by many jobs: waiting for the page is not what these tests measure.
expect.set_options(timeout=15_000)

CHROMIUM = Path(os.environ.get("LORE_TEST_CHROMIUM", "/usr/bin/chromium"))
IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
DESKTOP: ViewportSize = {"width": 1280, "height": 900}
PHONE: ViewportSize = {"width": 375, "height": 812}


@dataclass(frozen=True)
class ServedLore:
    base_url: str
    viewer_token: str
    editor_token: str
    #: The same server started with no token configured (the unauthenticated mode).
    unauthenticated_url: str


@pytest.fixture(scope="module")
def served_lore() -> Iterator[ServedLore]:
    """The servers the page is tested against: the contract stand-in on free 127.0.0.1
    ports, loaded with the example runbooks and the vault pack, once with a viewer and an
    editor token (made up per run) and once with no token at all."""
    viewer, editor = "viewer-" + secrets.token_hex(12), "editor-" + secrets.token_hex(12)
    tokens = {viewer: ("vera viewer", Role.VIEWER), editor: ("eddie editor", Role.EDITOR)}
    with _serve(tokens) as base_url, _serve({}) as unauthenticated_url:
        yield ServedLore(base_url, viewer, editor, unauthenticated_url)


@contextlib.contextmanager
def _serve(tokens: dict[str, tuple[str, Role]]) -> Iterator[str]:
    app = web_contract_app.build_app(tokens)
    web_contract_app.run_corpus_load(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the contract stand-in did not start", pytrace=False)
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        reason = f"{CHROMIUM} is absent: apt-get install chromium (what .ci/run does)"
        if in_ci():
            pytest.fail(f"CI=true and {reason}; a skip would hide it", pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield launched
        launched.close()


@pytest.fixture
def page_problems() -> list[str]:
    """What went wrong on the page; a test that provokes an error response removes it."""
    return []


@pytest.fixture
def page(browser: Browser, served_lore: ServedLore, page_problems: list[str]) -> Iterator[Page]:
    """A fresh browser profile at 1280 px. Any script error, CSP violation or failed load
    on the page fails the test (the 401 of the signed-out session probe is expected)."""
    context = browser.new_context(viewport=DESKTOP, base_url=served_lore.base_url)
    opened = context.new_page()
    problems = page_problems
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "status of 401" not in message.text:
            problems.append(f"console: {message.text}")

    opened.on("console", on_console)
    yield opened
    context.close()
    assert not problems, problems


def sign_in(page: Page, token: str) -> None:
    page.goto("/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).to_be_visible()


def search(page: Page, query: str) -> None:
    box = page.get_by_role("searchbox", name="Search knowledge")
    box.fill(query)
    box.press("Enter")
    expect(page.locator("#results-notice")).to_be_visible()
    expect(page.locator("#results")).not_to_contain_text("Searching…")


def citations_for(page: Page, uri_part: str) -> int:
    return page.locator(".citation", has=page.locator(".uri", has_text=uri_part)).count()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def no_horizontal_overflow(page: Page) -> None:
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], f"page is {widths[0]} px wide in a {widths[1]} px viewport"


def make_docx(heading: str, body: str) -> bytes:
    document = docx.Document()
    document.add_heading(heading, level=1)
    document.add_paragraph(body)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def quote_uri(uri: str) -> str:
    """A uri as the one path segment (and URL fragment) the page and the API use."""
    return quote(uri, safe="")
