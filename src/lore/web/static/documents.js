// The document tree, one document rendered with its sections, the Markdown editor with a
// live preview (uploads and notes), and delete with a confirmation.
import { allows, api, documentPath } from "./api.js";
import { $, age, badge, docHref, flash, h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const TYPE_NAMES = {
  vault: "Vault", git: "Git repositories", filesystem: "Files", confluence: "Confluence",
  upload: "Uploads", manual: "Notes",
};

function treeDocument(doc) {
  return h("li", { class: "tree-doc" },
    h("a", { href: docHref(doc.uri), title: doc.uri }, doc.title || doc.uri),
    " ", h("span", { class: "tree-age" }, ...age(doc.age_days, doc.stale)));
}

// A branch of the tree. The tree is rebuilt after every upload, save and delete; the
// branches the reader opened (or closed) stay so, by key.
function branch(key, openByDefault, opened, summary, list) {
  const details = h("details", { open: opened.has(key) ? opened.get(key) : openByDefault }, h("summary", {}, ...summary), list);
  details.dataset.key = key;
  return h("li", {}, details);
}

function count(n) {
  return h("span", { class: "count", "aria-label": `${n} documents` }, String(n));
}

function treeList(key, node, opened) {
  return h("ul", {},
    (node.folders || []).map((folder) => branch(`${key}/${folder.path}`, false, opened,
      [folder.path.split("/").pop() || folder.path, " ", count(folder.count)], treeList(`${key}/${folder.path}`, folder, opened))),
    (node.documents || []).map(treeDocument));
}

export async function loadTree() {
  const body = await api("GET", "/v1/documents");
  const tree = $("tree");
  const opened = new Map([...tree.querySelectorAll("details")].map((d) => [d.dataset.key, d.open]));
  const types = body.source_types || [];
  if (types.length === 0) {
    tree.replaceChildren(h("p", { class: "muted" }, "No documents yet."));
    return;
  }
  tree.replaceChildren(h("ul", { class: "tree-root" }, types.map((kind) => {
    const sources = kind.sources || [];
    return branch(kind.source_type, true, opened,
      [badge(kind.source_type), " ", TYPE_NAMES[kind.source_type] || kind.source_type, " ", count(kind.count)],
      h("ul", {}, sources.map((source) => {
        const key = `${kind.source_type}/${source.name}`;
        return branch(key, sources.length === 1, opened, [source.name, " ", count(source.count)],
          treeList(key, source, opened));
      })));
  })));
}

let current = null; // the document on screen, for edit and delete
// Runs a write and reports its failure on the page (set by app.js through the wire* calls).
let guarded = async (work) => work();

function headingId(index) {
  return `section-${index + 1}`;
}

// The sections the index holds (the chunks' heading paths), each linked to its heading in
// the rendered document.
function sectionLinks(doc, body) {
  const headings = [...body.querySelectorAll("h1, h2, h3, h4, h5, h6")];
  headings.forEach((heading, index) => heading.setAttribute("id", headingId(index)));
  const seen = new Set();
  const items = [];
  for (const chunk of doc.chunks || []) {
    if (!chunk.section || seen.has(chunk.section)) continue;
    seen.add(chunk.section);
    const last = chunk.section.split("›").pop().trim();
    const target = headings.find((heading) => heading.textContent.trim() === last);
    items.push(h("li", {}, target
      ? h("a", { href: "#", "data-target": target.id }, chunk.section)
      : chunk.section));
  }
  return items.length ? [h("h2", {}, "Sections"), h("ol", {}, items)] : [];
}

export async function showDocument(uri) {
  const doc = await api("GET", documentPath(uri));
  current = doc;
  $("doc-title").textContent = doc.title || doc.uri;
  const external = /^https?:\/\//i.test(doc.uri)
    ? h("a", { href: doc.uri, target: "_blank", rel: "noopener noreferrer" }, "open the original")
    : h("code", { class: "uri" }, doc.uri);
  $("doc-meta").replaceChildren(badge(doc.source_type), " ", doc.source, " · ", ...age(doc.age_days, doc.stale),
    " · revision ", h("code", {}, String(doc.revision || "").slice(0, 12)), " · ", external);
  const body = h("div", {}, renderMarkdown(doc.markdown));
  $("doc-body").replaceChildren(...body.childNodes);
  $("doc-sections").replaceChildren(...sectionLinks(doc, $("doc-body")));
  const mayChange = doc.editable && allows("editor");
  $("doc-edit").hidden = !mayChange;
  $("doc-delete").hidden = !mayChange;
  return doc;
}

export function currentDocument() {
  return current;
}

export function wireDocumentView(navigate, guard) {
  guarded = guard;
  $("doc-sections").addEventListener("click", (event) => {
    const link = event.target.closest("a[data-target]");
    if (!link) return;
    event.preventDefault();
    const heading = $(link.dataset.target);
    heading.setAttribute("tabindex", "-1");
    heading.focus();
    heading.scrollIntoView({ block: "start" });
  });
  $("doc-edit").addEventListener("click", () => navigate(`${docHref(current.uri)}/edit`));
  $("doc-delete").addEventListener("click", () => {
    $("confirm-text").textContent = `“${current.title}” (${current.uri}) will be removed from the index. This cannot be undone.`;
    $("confirm-dialog").showModal();
  });
  $("confirm-dialog").addEventListener("close", async () => {
    if ($("confirm-dialog").returnValue !== "delete" || current === null) return;
    const gone = current;
    await guarded(async () => {
      await api("DELETE", documentPath(gone.uri));
      current = null;
      flash(`Deleted “${gone.title}”.`);
      await loadTree();
      navigate("#/");
    });
  });
}

// --- editor ------------------------------------------------------------------------------

let editing = null; // null: a new note; else the uri being edited

export async function openEditor(uri) {
  editing = uri;
  const doc = uri === null ? { title: "", markdown: "" } : await api("GET", documentPath(uri));
  if (uri !== null && !doc.editable) throw new Error("this document is read-only here: change it where it is written");
  $("editor-heading").textContent = uri === null ? "New note" : `Edit “${doc.title}”`;
  $("editor-title").value = doc.title || "";
  $("editor-markdown").value = doc.markdown || "";
  preview();
}

function preview() {
  $("editor-preview").replaceChildren(renderMarkdown($("editor-markdown").value));
}

export function wireEditor(navigate, guard) {
  guarded = guard;
  $("editor-markdown").addEventListener("input", preview);
  $("editor-cancel").addEventListener("click", () => navigate(editing === null ? "#/" : docHref(editing)));
  $("editor-form").addEventListener("submit", (event) => {
    event.preventDefault();
    guard(async () => {
      const title = $("editor-title").value.trim();
      const markdown = $("editor-markdown").value;
      const saved = editing === null
        ? await api("POST", "/v1/notes", { title, markdown })
        : await api("PUT", documentPath(editing), title ? { markdown, title } : { markdown });
      flash(`Saved “${saved.title}”.`);
      await loadTree();
      navigate(docHref(saved.uri));
    });
  });
}
