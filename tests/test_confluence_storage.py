"""Storage format (Confluence's XHTML) to Markdown: each Confluence-only element, and the
plain HTML that markdownify keeps (headings, lists, tables, code)."""

from __future__ import annotations

import pytest

from lore.sources.confluence.storage import storage_to_markdown


def macro(
    name: str, *, parameters: dict[str, str] | None = None, body: str = "", plain: str | None = None
) -> str:
    params = "".join(
        f'<ac:parameter ac:name="{key}">{value}</ac:parameter>' for key, value in (parameters or {}).items()
    )
    inner = f"<ac:plain-text-body><![CDATA[{plain}]]></ac:plain-text-body>" if plain is not None else ""
    if body:
        inner += f"<ac:rich-text-body>{body}</ac:rich-text-body>"
    return f'<ac:structured-macro ac:name="{name}">{params}{inner}</ac:structured-macro>'


def test_code_macro_becomes_a_fenced_block_with_its_language_and_verbatim_text() -> None:
    code = "kubectl get pods -n kube_system | grep '<none>'\necho *done* && exit 0"
    markdown = storage_to_markdown(macro("code", parameters={"language": "bash", "title": "t"}, plain=code))
    assert markdown == f"```bash\n{code}\n```\n"


def test_noformat_and_code_without_language_are_plain_fences() -> None:
    assert storage_to_markdown(macro("noformat", plain="raw text")) == "```\nraw text\n```\n"
    assert storage_to_markdown(macro("code", plain="x = 1")) == "```\nx = 1\n```\n"


@pytest.mark.parametrize(("name", "label"), [("info", "Info"), ("note", "Note"), ("warning", "Warning"),
                                             ("tip", "Tip")])
def test_panels_become_block_quotes_with_a_label(name: str, label: str) -> None:
    markdown = storage_to_markdown(macro(name, body="<p>Never drain two nodes at once.</p>"))
    assert markdown == f"> **{label}:**\n>\n> Never drain two nodes at once.\n"
    titled = storage_to_markdown(macro(name, parameters={"title": "Careful"}, body="<p>x</p>"))
    assert titled.startswith(f"> **{label}: Careful**")


def test_expand_keeps_its_body_under_a_bold_title() -> None:
    markdown = storage_to_markdown(macro("expand", parameters={"title": "Full log"}, body="<p>line one</p>"))
    assert markdown == "**Full log**\n\nline one\n"
    assert storage_to_markdown(macro("expand", body="<p>x</p>")).startswith("**Details**")


def test_status_becomes_its_title_in_brackets() -> None:
    status = macro("status", parameters={"colour": "Green", "title": "Resolved"})
    assert storage_to_markdown(f"<p>State: {status}</p>") == "State: [RESOLVED]\n"


def test_task_lists_become_check_boxes() -> None:
    tasks = (
        "<ac:task-list>"
        "<ac:task><ac:task-id>1</ac:task-id><ac:task-status>complete</ac:task-status>"
        "<ac:task-body>check the disk</ac:task-body></ac:task>"
        "<ac:task><ac:task-id>2</ac:task-id><ac:task-status>incomplete</ac:task-status>"
        "<ac:task-body>page the <strong>owner</strong></ac:task-body></ac:task>"
        "</ac:task-list>"
    )
    assert storage_to_markdown(tasks) == "- [x] check the disk\n- [ ] page the **owner**\n"


def test_page_and_user_links_become_text_and_images_their_alt_text() -> None:
    storage = (
        '<p>See <ac:link><ri:page ri:content-title="DNS runbook" /></ac:link>, '
        '<ac:link><ri:page ri:content-title="x" /><ac:plain-text-link-body><![CDATA[the TLS page]]>'
        "</ac:plain-text-link-body></ac:link>, ask "
        '<ac:link><ri:user ri:username="jdoe" /></ac:link> or '
        '<ac:link><ri:user ri:account-id="557058:0000" /></ac:link>.</p>'
        '<p><ac:image ac:alt="network diagram"><ri:attachment ri:filename="net.png" /></ac:image></p>'
        '<p><ac:image><ri:url ri:value="https://example.invalid/x.png" /></ac:image>end</p>'
    )
    assert storage_to_markdown(storage) == (
        "See DNS runbook, the TLS page, ask @jdoe or @user.\n\nnetwork diagram\n\nend\n"
    )


def test_headings_lists_tables_and_nesting_survive() -> None:
    code = macro("code", parameters={"language": "sql"}, plain="SELECT 1")
    storage = (
        "<h1>Runbook</h1><h3>Checks</h3>"
        "<ul><li>one<ul><li>two</li></ul></li></ul><ol><li>first</li><li>second</li></ol>"
        "<table><colgroup><col /></colgroup><tbody>"
        "<tr><th><p>Alert</p></th><th><p>Action</p></th></tr>"
        "<tr><td><p>etcdNoLeader</p></td><td><p>restart_member</p></td></tr>"
        "</tbody></table>"
        + macro("warning", body="<p>inside</p>" + code)
    )
    markdown = storage_to_markdown(storage)
    assert markdown.startswith("# Runbook\n\n### Checks\n\n- one\n  - two\n\n1. first\n2. second\n")
    assert "| Alert | Action |\n| --- | --- |\n| etcdNoLeader | restart_member |" in markdown
    assert "> **Warning:**\n>\n> inside\n>\n> ```sql\n> SELECT 1\n> ```" in markdown


def test_generated_macros_are_dropped_and_unknown_ones_keep_their_body() -> None:
    kept = macro("section", body="<p>kept</p>")
    storage = macro("toc", parameters={"maxLevel": "2"}) + kept + "<p>after</p>"
    assert storage_to_markdown(storage) == "kept\n\nafter\n"


def test_entities_and_empty_bodies() -> None:
    assert storage_to_markdown("<p>a&nbsp;b &amp; c</p>") == "a\xa0b & c\n"
    assert storage_to_markdown("") == ""
