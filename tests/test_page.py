"""The knowledge page (src/lore/web/static/) in a real headless browser: Playwright for
Python driving Debian's ``chromium`` package (installed by .ci/run; never a browser
download). The server, the browser and the shared steps are in tests/page_harness.py; the
server comes from its one fixture, ``served_lore``."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import httpx

# Playwright's names come through the harness, which skips (or, under CI, fails) first when
# Playwright or chromium is missing.
from page_harness import (
    DESKTOP,
    PHONE,
    Browser,
    Page,
    ServedLore,
    bearer,
    browser,
    citations_for,
    expect,
    make_docx,
    no_horizontal_overflow,
    page,
    page_problems,
    quote_uri,
    search,
    served_lore,
    sign_in,
)

# The fixtures are imported by name, which is how pytest finds them in a test module.
__all__ = ["browser", "page", "page_problems", "served_lore"]


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
    expect(page.locator(".upload-row.failed", has_text="firmware.bin")).to_contain_text("is not accepted")

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
    second = tmp_path / "tree-check.md"
    second.write_text("# Tree check\n\nok\n")
    page.locator("#upload-input").set_input_files(second)
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
    # Hybrid search still fills its places from the vector channel, so the note may be
    # cited; what must be gone is the old text.
    cited = page.locator(".citation", has=page.locator(".uri", has_text=note_uri)).all_inner_texts()
    assert not [text for text in cited if before in text]

    page.goto(f"/#/doc/{quote_uri(note_uri)}")
    page.get_by_role("button", name="Delete").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Pager handoff checklist")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.locator("#flash")).to_contain_text("Deleted")
    search(page, after)
    assert citations_for(page, note_uri) == 0


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
    page.goto(f"/#/doc/{quote_uri(uri)}")
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
        ("DELETE", f"/v1/documents/{quote_uri(uri)}", None),
        ("PUT", f"/v1/documents/{quote_uri(uri)}", {"markdown": "defaced"}),
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
        f"{served_lore.base_url}/v1/documents/{quote_uri(uri)}", headers=bearer(served_lore.viewer_token)
    )
    assert still.json()["markdown"].endswith("read only for viewers")


def test_a_bad_token_sign_out_and_an_ended_session(page: Page, served_lore: ServedLore) -> None:
    served = page.goto("/")
    assert served is not None
    # The tests run under the policy lore serve sends: no inline script or style works.
    policy = served.headers["content-security-policy"]
    assert policy.startswith("default-src 'self';")
    assert "frame-ancestors 'none'" in policy  # the signed-in editor cannot be framed
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
    expect(page.get_by_role("searchbox", name="Search knowledge")).to_be_focused()
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
    page.goto(f"/#/doc/{quote_uri(runbook)}")
    expect(page.locator("#doc-title")).to_have_text("etcd member has no leader (etcdNoLeader)")
    expect(page.get_by_role("button", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.goto(f"/#/doc/{quote_uri('file://runbooks/no-such-page.md')}")
    expect(page.locator("#error")).to_contain_text("no document")
    expect(page.locator("#doc-title")).to_have_text("etcd member has no leader (etcdNoLeader)")
    page_problems[:] = [problem for problem in page_problems if "status of 404" not in problem]
    # Going to the edit view by its URL says why instead of offering an editor.
    page.goto(f"/#/doc/{quote_uri(runbook)}/edit")
    expect(page.locator("#error")).to_contain_text("read-only")
    expect(page.locator("#view-editor")).to_be_hidden()
    refused = httpx.delete(
        f"{served_lore.base_url}/v1/documents/{quote_uri(runbook)}", headers=bearer(served_lore.editor_token)
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


def test_passages_are_sanitised_markdown(page: Page, served_lore: ServedLore) -> None:
    hostile = (
        '# Hostile note\n\n<img src=x onerror="window.pwned=1">\n\n<script>window.pwned=2</script>\n\n'
        "[click me](javascript:window.pwned=3) and [ok](https://example.com/runbook)\n\n"
        '[relative](/v1/session) [data](data:text/html,hi) <a href="https://example.com/x">raw</a>\n\n'
        "```html\n<b>shown as code</b>\n```\n\n[away](https://example.org/exfil)\n"
    )
    made = httpx.post(
        f"{served_lore.base_url}/v1/notes",
        json={"title": "Hostile note", "markdown": hostile},
        headers=bearer(served_lore.editor_token),
    )
    sign_in(page, served_lore.viewer_token)
    page.goto(f"/#/doc/{quote_uri(made.json()['uri'])}")
    body = page.locator("#doc-body")
    expect(body.locator("pre code")).to_have_text("<b>shown as code</b>\n")
    expect(body.locator("img, script, b")).to_have_count(0)
    # Only https links to allowed hosts are links (the bare URL inside the raw <a> is
    # linkified): relative links stay text, and so does raw HTML, even a harmless <a>.
    hrefs = body.locator("a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert hrefs == ["https://example.com/runbook", "https://example.com/x"]
    # A host outside [safety] allowed_link_hosts never reaches the page as a link.
    expect(body).to_contain_text("away [lore: removed external link to ")
    # javascript: and data: links are neutralised by the safety chain before the page.
    expect(body).to_contain_text("click me [lore: removed external link to a javascript URL]")
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
    page.locator(".citation").first.get_by_role("link", name="Open source document").click()
    expect(page.locator("#doc-title")).to_be_visible()
    no_horizontal_overflow(page)
    page.get_by_role("link", name="Sync", exact=True).click()
    expect(page.locator("#sync-sources table")).to_be_visible()
    no_horizontal_overflow(page)
