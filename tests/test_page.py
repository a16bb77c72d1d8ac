"""The knowledge page (src/lore/web/static/) in a real headless browser: Playwright for
Python driving Debian's ``chromium`` package (installed by .ci/run; never a browser
download). Without chromium the tests skip with the reason, except under ``CI=true``, where
they fail.

The server comes from ONE fixture, ``served_lore``. Until ``lore serve`` is merged it is the
contract stand-in in tests/web_contract_app.py; swapping in the real server changes only
that fixture (start ``lore serve`` on 127.0.0.1 with a viewer and an editor token, and a
second one with no token for the unauthenticated mode).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from optional_extras import in_ci, require_extra

require_extra("playwright.sync_api", "dev")
require_extra("uvicorn", "mcp")
docx = require_extra("docx", "dev")

import uvicorn  # noqa: E402
from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize, expect, sync_playwright  # noqa: E402

import web_contract_app  # noqa: E402
from lore.access import Role  # noqa: E402

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


def test_sign_in_search_and_see_a_citation(page: Page, served_lore: ServedLore) -> None:
    sign_in(page, served_lore.viewer_token)
    # "/" is the search shortcut from anywhere outside a text field.
    page.locator("body").press("/")
    expect(page.get_by_role("searchbox", name="Search knowledge")).to_be_focused()
    search(page, "etcdNoLeader etcd member has no leader")

    first = page.locator(".citation").first
    expect(first.locator(".citation-title")).to_contain_text("etcd member has no leader (etcdNoLeader) § ")
    expect(first.locator(".badge")).to_have_text("from your repos")
    expect(first.locator(".age")).to_have_text(re.compile(r"^(updated today|1 day old|\d+ days old)$"))
    # The passage is rendered Markdown, not shown as its source.
    expect(first.locator(".passage").locator("p, table, pre, ul, ol").first).to_be_visible()
    expect(first.locator(".passage")).not_to_contain_text("## ")

    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=IMAGES / "page-search.png")

    # The link to the source document opens it, rendered with its sections.
    first.get_by_role("link", name="Open source document").click()
    expect(page.locator("#doc-title")).to_have_text("etcd member has no leader (etcdNoLeader)")
    meta = r"^from your repos runbooks · \d+ days old · revision \w+ · file://runbooks/kubernetes/etcd-no-leader.md$"
    expect(page.locator("#doc-meta")).to_have_text(re.compile(meta))
    expect(page.locator("#doc-sections li").first).to_be_visible()
    expect(page.locator("#doc-body h2").first).to_be_visible()

    # The token went into a cookie the page's script cannot read, and nowhere else.
    cookies = {cookie["name"]: cookie for cookie in page.context.cookies()}
    assert cookies["lore_session"]["httpOnly"]
    assert cookies["lore_session"]["sameSite"] == "Strict"
    stored = page.evaluate("JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie])")
    assert served_lore.viewer_token not in stored
    assert "lore_session" not in stored

    page.go_back()
    expect(page.locator(".citation").first).to_be_visible()
    # The built-in playbook pack is badged as the vault, and the search can keep to it.
    search(page, "mysql replication")
    expect(page.locator(".citation .badge", has_text="from vault").first).to_be_visible()
    page.get_by_label("From").select_option("vault")
    search(page, "replication lag")
    badges = page.locator(".citation .badge")
    expect(badges.first).to_be_visible()
    assert set(badges.all_inner_texts()) == {"from vault"}
    page.get_by_label("From").select_option("")
    # An old page is flagged stale.
    search(page, "redis memory full evicting keys")
    old = page.locator(".citation", has_text="Redis memory full and evicting keys").first
    expect(old.locator(".stale")).to_have_text("stale")


def test_upload_a_docx_and_find_its_text(page: Page, served_lore: ServedLore, tmp_path: Path) -> None:
    word = "zorbulator" + secrets.token_hex(4)
    upload = tmp_path / "vendor failover #2.docx"  # the uri is one percent-encoded path segment
    upload.write_bytes(make_docx("Vendor failover guide", f"Run the {word} drill before failing over."))
    garbage = tmp_path / "firmware.bin"
    garbage.write_bytes(b"\x00\x01\x02 not a document \x00")

    sign_in(page, served_lore.editor_token)
    page.locator("#upload-input").set_input_files([upload, garbage])
    done = page.locator(".upload-row.done", has_text="vendor failover #2.docx")
    expect(done).to_contain_text("added: Vendor failover guide")
    expect(done.locator("progress")).to_have_js_property("value", 1)
    # One bad file gets its own error and does not fail the other.
    expect(page.locator(".upload-row.failed", has_text="firmware.bin")).to_contain_text("not a text")

    # Drag and drop: a Markdown file dropped on the zone is uploaded too.
    dropped = "quibblestone" + secrets.token_hex(4)
    transfer = page.evaluate_handle(
        """text => { const t = new DataTransfer();
            t.items.add(new File([text], "dropped-note.md", {type: "text/markdown"})); return t; }""",
        f"# Dropped runbook\n\nThe {dropped} step.\n",
    )
    page.locator("#dropzone").dispatch_event("drop", {"dataTransfer": transfer})
    expect(page.locator(".upload-row.done", has_text="dropped-note.md")).to_be_visible()

    expect(page.locator("#tree")).to_contain_text("Uploads")
    # The tree is rebuilt after each upload; a folder the reader opened stays open.
    folder = page.locator('#tree details[data-key="filesystem/runbooks/kubernetes"]')
    folder.locator("summary").first.click()
    expect(folder).to_have_attribute("open", "")
    page.locator("#upload-input").set_input_files(
        files=[{"name": "tree-check.md", "mimeType": "text/markdown", "buffer": b"# Tree check\n\nok"}]
    )
    expect(page.locator(".upload-row.done", has_text="tree-check.md")).to_be_visible()
    expect(page.locator("#tree")).to_contain_text("Tree check")
    expect(folder).to_have_attribute("open", "")
    search(page, word)
    hit = page.locator(".citation", has_text=word).first
    expect(hit.locator(".badge")).to_have_text("uploaded")
    expect(hit.locator(".citation-title")).to_contain_text("Vendor failover guide")
    search(page, dropped)
    expect(page.locator(".citation", has_text=dropped).first).to_be_visible()

    # An upload opens from its row, and an editor may edit or delete it.
    done.get_by_role("link", name="Vendor failover guide").click()
    expect(page.locator("#doc-title")).to_have_text("Vendor failover guide")
    expect(page.locator("#doc-meta .badge")).to_have_text("uploaded")
    expect(page.locator("#doc-body")).to_contain_text(word)
    expect(page.get_by_role("button", name="Edit")).to_be_visible()
    expect(page.get_by_role("button", name="Delete")).to_be_visible()


def test_edit_a_note_see_it_in_search_then_delete_it(page: Page, served_lore: ServedLore) -> None:
    before, after = "plinthwhistle" + secrets.token_hex(3), "marrowgauge" + secrets.token_hex(3)
    sign_in(page, served_lore.editor_token)
    page.get_by_role("link", name="New note").click()
    page.get_by_label("Title").fill("Pager handoff checklist")
    page.get_by_label("Markdown").fill(
        f"# Pager handoff\n\n## Steps\n\nCheck the {before} dashboard.\n\n```sh\nkubectl get pods\n```\n"
    )
    # The preview renders as you type; the code block stays a code block.
    expect(page.locator("#editor-preview pre code")).to_have_text("kubectl get pods\n")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#doc-title")).to_have_text("Pager handoff checklist")
    note_uri = page.locator("#doc-meta .uri").inner_text()

    search(page, before)
    expect(page.locator(".citation").first.locator(".badge")).to_have_text("note")

    page.locator(".citation").first.get_by_role("link", name="Open source document").click()
    page.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Markdown")
    editor.fill(editor.input_value().replace(before, after))
    expect(page.locator("#editor-preview")).to_contain_text(after)
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#doc-body")).to_contain_text(after)

    search(page, after)
    assert citations_for(page, note_uri) >= 1
    search(page, before)
    assert citations_for(page, note_uri) == 0

    page.goto(f"/#/doc/{_quote(note_uri)}")
    page.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Pager handoff checklist")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.locator("#flash")).to_contain_text("Deleted")
    search(page, after)
    assert citations_for(page, note_uri) == 0


def _quote(uri: str) -> str:
    from urllib.parse import quote

    return quote(uri, safe="")


def test_a_viewer_sees_no_write_controls_and_the_api_refuses_them(
    page: Page, served_lore: ServedLore
) -> None:
    made = httpx.post(
        f"{served_lore.base_url}/v1/notes",
        json={"title": "Viewer test note", "markdown": "# Viewer test note\n\nread only for viewers"},
        headers=bearer(served_lore.editor_token),
    )
    assert made.status_code == 200, made.text
    uri = made.json()["uri"]

    sign_in(page, served_lore.viewer_token)
    expect(page.locator("#upload-panel")).to_be_hidden()
    expect(page.get_by_role("link", name="New note")).to_have_count(0)
    page.goto(f"/#/doc/{_quote(uri)}")
    expect(page.locator("#doc-title")).to_have_text("Viewer test note")
    expect(page.get_by_role("button", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.get_by_role("link", name="Sync", exact=True).click()
    expect(page.locator("#sync-sources")).to_contain_text("runbooks")
    expect(page.get_by_role("button", name=re.compile("Sync .*now"))).to_have_count(0)

    # The API refuses a viewer's session (with its CSRF token) and a viewer's bearer token.
    csrf = page.evaluate("fetch('/v1/session').then(r => r.json()).then(b => b.csrf_token)")
    with_cookie = {"X-CSRF-Token": csrf}
    attempts = [
        ("DELETE", f"/v1/documents/{_quote(uri)}", None),
        ("PUT", f"/v1/documents/{_quote(uri)}", {"markdown": "defaced"}),
        ("POST", "/v1/notes", {"title": "x", "markdown": "y"}),
        ("POST", "/v1/sync", {}),
    ]
    for method, path, body in attempts:
        via_page = page.request.fetch(path, method=method, headers=with_cookie, data=body)
        assert via_page.status == 403, (method, path, via_page.text())
        assert via_page.headers["content-type"].startswith("application/problem+json")
        via_token = httpx.request(
            method, served_lore.base_url + path, json=body, headers=bearer(served_lore.viewer_token)
        )
        assert via_token.status_code == 403, (method, path, via_token.text)
    uploaded = page.request.post(
        "/v1/documents",
        headers=with_cookie,
        multipart={"file": {"name": "a.md", "mimeType": "text/markdown", "buffer": b"# a"}},
    )
    assert uploaded.status == 403
    assert "viewer" in uploaded.json()["detail"]
    still = httpx.get(
        f"{served_lore.base_url}/v1/documents/{_quote(uri)}", headers=bearer(served_lore.viewer_token)
    )
    assert still.json()["markdown"].endswith("read only for viewers")


def test_a_bad_token_sign_out_and_an_ended_session(page: Page, served_lore: ServedLore) -> None:
    served = page.goto("/")
    assert served is not None
    # The tests run under the policy lore serve sends: no inline script or style works.
    assert served.headers["content-security-policy"] == "default-src 'self'"
    page.get_by_label("API token").fill("not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#signin-error")).to_have_text("That token is not valid.")
    expect(page.locator("#app")).to_be_hidden()

    sign_in(page, served_lore.editor_token)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API token")).to_be_visible()
    assert "lore_session" not in {cookie["name"] for cookie in page.context.cookies()}
    assert page.request.get("/v1/documents").status == 401

    # A session that ends under the page (revoked, expired) brings back the sign-in form.
    sign_in(page, served_lore.viewer_token)
    csrf = page.evaluate("fetch('/v1/session').then(r => r.json()).then(b => b.csrf_token)")
    assert page.request.delete("/v1/session", headers={"X-CSRF-Token": csrf}).status == 204
    search_box = page.get_by_role("searchbox", name="Search knowledge")
    search_box.fill("etcd")
    search_box.press("Enter")
    expect(page.locator("#signin-error")).to_have_text("Your session has ended; sign in again.")


def test_the_page_works_from_the_keyboard(page: Page, served_lore: ServedLore) -> None:
    page.goto("/")
    expect(page.get_by_label("API token")).to_be_focused()
    page.keyboard.type(served_lore.viewer_token)
    page.keyboard.press("Enter")
    expect(page.locator("#whoami")).to_be_visible()
    page.keyboard.press("/")
    page.keyboard.type("postgres connection exhaustion")
    page.keyboard.press("Enter")
    first_link = page.locator(".citation-title a").first
    expect(first_link).to_be_visible()
    for _ in range(6):  # the source filter and the button come between the box and the results
        page.keyboard.press("Tab")
        if first_link.evaluate("link => link === document.activeElement"):
            break
    expect(first_link).to_be_focused()
    title = first_link.inner_text().split(" § ")[0]
    page.keyboard.press("Enter")
    # Focus lands on what opened, so a screen reader announces it.
    expect(page.locator("#doc-title")).to_be_focused()
    expect(page.locator("#doc-title")).to_have_text(title)


def test_an_editor_cannot_change_a_read_only_source(
    page: Page, served_lore: ServedLore, page_problems: list[str]
) -> None:
    runbook = "file://runbooks/kubernetes/etcd-no-leader.md"
    sign_in(page, served_lore.editor_token)
    page.goto(f"/#/doc/{_quote(runbook)}")
    expect(page.locator("#doc-title")).to_have_text("etcd member has no leader (etcdNoLeader)")
    expect(page.get_by_role("button", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.goto(f"/#/doc/{_quote('file://runbooks/no-such-page.md')}")
    expect(page.locator("#error")).to_contain_text("no document")
    expect(page.locator("#doc-title")).to_have_text("etcd member has no leader (etcdNoLeader)")
    page_problems[:] = [problem for problem in page_problems if "status of 404" not in problem]
    # Going to the edit view by its URL says why instead of offering an editor.
    page.goto(f"/#/doc/{_quote(runbook)}/edit")
    expect(page.locator("#error")).to_contain_text("read-only")
    expect(page.locator("#view-editor")).to_be_hidden()
    refused = httpx.delete(
        f"{served_lore.base_url}/v1/documents/{_quote(runbook)}", headers=bearer(served_lore.editor_token)
    )
    assert refused.status_code == 403
    assert "read-only" in refused.json()["detail"]


def test_unauthenticated_mode_needs_no_sign_in(browser: Browser, served_lore: ServedLore) -> None:
    context = browser.new_context(viewport=DESKTOP, base_url=served_lore.unauthenticated_url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto("/")
    expect(page.locator("#whoami")).to_contain_text("local")
    expect(page.locator("#whoami-role")).to_have_text("admin, unauthenticated")
    expect(page.get_by_label("API token")).to_be_hidden()
    expect(page.get_by_role("button", name="Sign out")).to_be_hidden()
    # A local admin writes: the page sends the CSRF header this mode also asks for.
    page.get_by_role("link", name="New note").click()
    page.get_by_label("Title").fill("Local note")
    page.get_by_label("Markdown").fill("# Local note\n\nwritten without a token")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#doc-title")).to_have_text("Local note")
    assert page.request.post("/v1/notes", data={"title": "x", "markdown": "y"}).status == 403
    context.close()
    assert not errors, errors


def test_a_write_without_the_csrf_header_is_refused(page: Page, served_lore: ServedLore) -> None:
    sign_in(page, served_lore.editor_token)
    refused = page.request.post("/v1/notes", data={"title": "csrf", "markdown": "no header"})
    assert refused.status == 403
    assert "CSRF" in refused.json()["detail"]


def test_an_editor_syncs_a_source_now(page: Page, served_lore: ServedLore) -> None:
    sign_in(page, served_lore.editor_token)
    page.get_by_role("link", name="Sync", exact=True).click()
    history = page.locator("#sync-history details", has=page.locator("summary", has_text="runbooks"))
    history.locator("summary").click()  # each source has its own history
    rows = history.locator("tbody tr")
    expect(rows.first).to_be_visible()
    before = rows.count()
    page.get_by_role("button", name="Sync runbooks now").click()
    expect(page.locator("#flash")).to_contain_text("Sync queued for runbooks")
    # The page follows the run until it is over; the history stays open and gains the run.
    expect(rows).to_have_count(before + 1)
    expect(page.locator("#sync-state")).to_have_text("No sync running.")
    expect(rows.first.locator(".sync-status")).to_have_text("ok")
    expect(page.get_by_role("button", name="Sync runbooks now")).to_be_enabled()
    expect(page.locator("#sync-history details", has_text="vault").locator("tbody tr")).to_have_count(1)


def test_passages_are_sanitised_markdown(page: Page, served_lore: ServedLore) -> None:
    hostile = (
        '# Hostile note\n\n<img src=x onerror="window.pwned=1">\n\n<script>window.pwned=2</script>\n\n'
        "[click me](javascript:window.pwned=3) and [ok](https://example.com/runbook)\n\n"
        '[relative](/v1/session) [data](data:text/html,hi) <a href="https://example.com/x">raw</a>\n\n'
        "```html\n<b>shown as code</b>\n```\n"
    )
    made = httpx.post(
        f"{served_lore.base_url}/v1/notes",
        json={"title": "Hostile note", "markdown": hostile},
        headers=bearer(served_lore.editor_token),
    )
    sign_in(page, served_lore.viewer_token)
    page.goto(f"/#/doc/{_quote(made.json()['uri'])}")
    body = page.locator("#doc-body")
    expect(body.locator("pre code")).to_have_text("<b>shown as code</b>\n")
    expect(body.locator("img, script, b")).to_have_count(0)
    # Only https links are links (the bare URL inside the raw <a> is linkified): javascript:,
    # relative and data: links stay text, and so does raw HTML, even a harmless <a>.
    hrefs = body.locator("a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert hrefs == ["https://example.com/runbook", "https://example.com/x"]
    expect(body).to_contain_text("[click me](javascript:window.pwned=3)")
    expect(body).to_contain_text('<a href="https://example.com/x">raw</a>')
    safe = body.get_by_role("link", name="ok")
    expect(safe).to_have_attribute("href", "https://example.com/runbook")
    expect(safe).to_have_attribute("rel", "noopener noreferrer nofollow")
    assert page.evaluate("window.pwned === undefined")


def test_phone_width_has_no_horizontal_overflow(page: Page, served_lore: ServedLore) -> None:
    page.set_viewport_size(PHONE)
    sign_in(page, served_lore.editor_token)
    no_horizontal_overflow(page)
    search(page, "kafka consumer lag keeps growing")
    expect(page.locator(".citation").first).to_be_visible()
    no_horizontal_overflow(page)
    IMAGES.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=IMAGES / "page-phone.png")
    page.locator(".citation").first.get_by_role("link", name="Open source document").click()
    expect(page.locator("#doc-title")).to_be_visible()
    no_horizontal_overflow(page)
    page.get_by_role("link", name="Sync", exact=True).click()
    expect(page.locator("#sync-sources table")).to_be_visible()
    no_horizontal_overflow(page)
