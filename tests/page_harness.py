"""The harness of the knowledge page's browser tests (tests/test_page.py): the server the
page is tested against, Debian's chromium driven by Playwright, and the steps the tests
share.

The server comes from ONE fixture, ``served_lore``: real ``lore serve`` processes on
127.0.0.1, one with a viewer and an editor token, a second one with no token for the
unauthenticated mode. Without chromium the tests skip
with the reason, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from optional_extras import in_ci, require_extra

require_extra("playwright.sync_api", "dev")
require_extra("fastapi", "serve")
docx = require_extra("docx", "dev")

import httpx  # noqa: E402
from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize, expect, sync_playwright  # noqa: E402

__all__ = ["Browser", "Page", "expect"]  # for tests/test_page.py, after the checks above

# Two cores shared by many jobs: waiting for the page is not what these tests measure.
expect.set_options(timeout=15_000)

CHROMIUM = Path(os.environ.get("LORE_TEST_CHROMIUM", "/usr/bin/chromium"))
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
LORE = Path(sys.executable).with_name("lore")
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
def served_lore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedLore]:
    """The servers the page is tested against: real ``lore serve`` processes on free
    127.0.0.1 ports, each over its own tmp project holding the example runbooks (a
    filesystem source), the vault pack and the default ``uploads`` and ``notes`` sources;
    the first with a viewer and an editor token made by ``lore token create``, the second
    with no token at all (the unauthenticated mode)."""
    authenticated = _project(tmp_path_factory.mktemp("lore-tokens"))
    viewer = _lore(authenticated, "token", "create", "--role", "viewer", "--name", "vera-viewer")
    editor = _lore(authenticated, "token", "create", "--role", "editor", "--name", "eddie-editor")
    unauthenticated = _project(tmp_path_factory.mktemp("lore-open"))
    with _serve(authenticated, editor) as base_url, _serve(unauthenticated) as unauthenticated_url:
        yield ServedLore(base_url, viewer, editor, unauthenticated_url)


def _project(root: Path) -> Path:
    """A lore.toml over the example runbooks, synced by ``lore sync`` (the runbooks and the
    vault pack, which the service's own syncs do not cover) before serving."""
    config = root / "lore.toml"
    config.write_text(
        'backend = "sqlite"\n'
        'db_path = "lore.db"\n'
        'embedder = "hashing"\n'
        f'audit_path = "{root / "audit.jsonl"}"\n'
        # Links to this host are kept by the safety chain (any other is neutralised), so the
        # page's own link sanitising is what the tests see.
        "[safety]\n"
        'allowed_link_hosts = ["example.com"]\n'
        "[[sources]]\n"
        'name = "runbooks"\n'
        'type = "filesystem"\n'
        f'path = "{EXAMPLES / "runbooks"}"\n'
        'visibility = "all-viewers"\n',
        encoding="utf-8",
    )
    _lore(config, "sync")
    return config


def _lore(config: Path, *args: str) -> str:
    """One ``lore`` command's stdout; its stderr in the failure when it fails."""
    done = subprocess.run(
        [str(LORE), "--config", str(config), *args], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"lore {' '.join(args)} exited {done.returncode}: {done.stderr}", pytrace=False)
    return done.stdout.strip()


@contextlib.contextmanager
def _serve(config: Path, editor: str | None = None) -> Iterator[str]:
    """``lore serve`` on a free port until it answers /readyz; SIGTERM afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (config.parent / "serve.log").open("w", encoding="utf-8")
    process = subprocess.Popen(
        [str(LORE), "--config", str(config), "serve", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while not _ready(url):
            if process.poll() is not None or time.monotonic() > deadline:
                text = (config.parent / "serve.log").read_text(encoding="utf-8")
                pytest.fail(f"lore serve did not become ready: {text}", pytrace=False)
            time.sleep(0.1)
        _sync(url, editor)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _sync(url: str, editor: str | None) -> None:
    """One run of the runbooks through the service (as the page's "Sync now" starts it), so
    the source has a history (``lore sync`` keeps none); the unauthenticated mode acts as
    admin and needs only the CSRF token."""
    with httpx.Client(base_url=url, timeout=30) as client:
        if editor is not None:
            client.headers.update(bearer(editor))
        else:
            client.headers["X-CSRF-Token"] = client.get("/v1/session").json()["csrf_token"]
        queued = client.post("/v1/sync", json={"source": "runbooks"})
        if queued.status_code != 202:
            pytest.fail(f"POST /v1/sync: {queued.status_code} {queued.text}", pytrace=False)
        deadline = time.monotonic() + 300
        while client.get("/v1/sync").json()["running"] or _queued(client):
            if time.monotonic() > deadline:
                pytest.fail("the first sync did not finish", pytrace=False)
            time.sleep(0.2)


def _queued(client: httpx.Client) -> bool:
    history = client.get("/v1/sync").json()["history"]
    return any(run["status"] in ("queued", "running") for run in history)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


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
