// The knowledge page: sign in, search, the document tree, documents, editing, uploads and
// sync. Plain ES modules, no framework and no build step; views are chosen by the URL
// fragment (#/, #/search?q=…, #/doc/<uri>, #/doc/<uri>/edit, #/new-note, #/sync).
import { allows, api, currentSession, forget, session, signIn, signOut, whenSignedOut } from "./api.js";
import { $, age, badge, docHref, h, showError, showOnly } from "./dom.js";
import { loadTree, openEditor, showDocument, wireDocumentView, wireEditor } from "./documents.js";
import { renderMarkdown } from "./markdown.js";
import { showSync, wireSync } from "./sync.js";
import { wireUpload } from "./upload.js";

const VIEWS = ["view-search", "view-doc", "view-editor", "view-sync"];

// Runs a user action; a failure is shown on the page instead of lost in the console.
async function guard(work) {
  try {
    await work();
  } catch (error) {
    if (error && error.status === 401) return; // whenSignedOut already shows the sign-in form
    showError(error);
  }
}

function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

// --- search ------------------------------------------------------------------------------

function citation(passage) {
  const heading = passage.section ? `${passage.title} § ${passage.section}` : passage.title;
  return h("article", { class: "citation", "aria-labelledby": `cite-${passage.rank}` },
    h("header", { class: "citation-header" },
      h("span", { class: "rank", "aria-hidden": "true" }, `[${passage.rank}]`),
      h("h2", { class: "citation-title", id: `cite-${passage.rank}` },
        h("a", { href: docHref(passage.uri) }, heading)),
      h("p", { class: "meta" }, badge(passage.source_type), " ", ...age(passage.age_days, passage.stale))),
    h("div", { class: "passage md" }, renderMarkdown(passage.text)),
    h("footer", { class: "citation-footer" },
      h("a", { href: docHref(passage.uri), class: "source-link" }, "Open source document"),
      " ", h("code", { class: "uri" }, passage.uri)));
}

let searches = 0;

async function runSearch(query, sourceType) {
  $("q").value = query;
  $("source-type").value = sourceType;
  const results = $("results");
  const notice = $("results-notice");
  if (!query.trim()) {
    notice.hidden = true;
    results.replaceChildren(h("p", { class: "muted" }, "Search the team's runbooks, postmortems, uploads and notes."));
    return;
  }
  results.replaceChildren(h("p", { class: "muted" }, "Searching…"));
  const mine = ++searches;
  let body;
  try {
    body = await api("POST", "/v1/search", sourceType ? { query, labels: { source_type: sourceType } } : { query });
  } catch (error) {
    notice.hidden = true;
    results.replaceChildren(h("p", { class: "error" }, `Search failed: ${error.message}`));
    throw error;
  }
  if (mine !== searches) return; // a newer search was started meanwhile; its answer wins
  if (body.error) {
    notice.hidden = true;
    results.replaceChildren(h("p", { class: "error" }, body.error));
    return;
  }
  const passages = body.passages || [];
  const meta = body.metadata || {};
  notice.hidden = false;
  // The server's notice says what passages are (untrusted, possibly outdated): shown as is.
  const untrusted = body.notice ? ` ${body.notice.charAt(0).toUpperCase()}${body.notice.slice(1)}.` : "";
  notice.textContent = `${passages.length} passage${passages.length === 1 ? "" : "s"}` +
    (meta.degraded ? " (degraded: lexical matching only)" : "") + "." + untrusted;
  // Passages were found but none reached min_confidence: the answer is "not documented".
  const empty = meta.no_match
    ? `No matching knowledge for this query: nothing found reaches confidence ${meta.min_confidence}.`
    : "Nothing found.";
  results.replaceChildren(...(passages.length ? passages.map(citation) : [h("p", { class: "muted" }, empty)]));
}

// --- routing -----------------------------------------------------------------------------

async function route() {
  if (session.role === null) return;
  $("error").hidden = true;
  const hash = location.hash || "#/";
  const doc = hash.match(/^#\/doc\/([^/]+)(\/edit)?$/);
  await guard(async () => {
    if (hash.startsWith("#/search")) {
      showOnly(VIEWS, "view-search");
      const params = new URLSearchParams(hash.split("?")[1] || "");
      await runSearch(params.get("q") || "", params.get("from") || "");
    } else if (doc) {
      const uri = decodeURIComponent(doc[1]);
      if (doc[2]) {
        await openEditor(uri); // first: a read-only document never shows an editor
        showOnly(VIEWS, "view-editor");
        $("editor-markdown").focus();
      } else {
        await showDocument(uri); // first: an unknown uri leaves the page as it was, with the error
        showOnly(VIEWS, "view-doc");
        $("doc-title").focus(); // a keyboard or screen-reader user lands on what opened
      }
    } else if (hash === "#/new-note" && allows("editor")) {
      await openEditor(null);
      showOnly(VIEWS, "view-editor");
      $("editor-markdown").focus();
    } else if (hash === "#/sync") {
      showOnly(VIEWS, "view-sync");
      await showSync();
      $("sync-heading").focus();
    } else {
      showOnly(VIEWS, "view-search");
      if (!$("results").hasChildNodes()) await runSearch("", "");
    }
  });
}

// --- session -----------------------------------------------------------------------------

function applyRole() {
  for (const element of document.querySelectorAll("[data-needs-role]")) {
    // Doc actions also depend on the document; showDocument decides those.
    if (element.id === "doc-edit" || element.id === "doc-delete") element.hidden = true;
    else element.hidden = !allows(element.dataset.needsRole);
  }
}

function showSignedIn() {
  // Hiding the form does not move focus off the token field at once (the browser fixes focus up
  // later); until it does, keys go to a hidden field and "/" would not reach the search box.
  if ($("signin").contains(document.activeElement)) document.activeElement.blur();
  $("signin").hidden = true;
  $("app").hidden = false;
  $("nav").hidden = false;
  $("whoami").hidden = false;
  $("whoami-name").textContent = session.name;
  $("whoami-role").textContent = session.unauthenticated ? `${session.role}, unauthenticated` : session.role;
  $("signout").hidden = session.unauthenticated;
  applyRole();
  guard(loadTree);
  route();
}

function showSignIn(message = "") {
  forget();
  $("app").hidden = true;
  $("nav").hidden = true;
  $("whoami").hidden = true;
  $("results").replaceChildren();
  $("upload-list").replaceChildren();
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("token").focus();
}

function wireSession() {
  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = $("token");
    const token = input.value.trim();
    if (!token) {
      $("signin-error").textContent = "Enter an API token.";
      return;
    }
    try {
      await signIn(token);
      input.value = ""; // the cookie carries the session from here on
      showSignedIn();
    } catch (error) {
      $("signin-error").textContent = error.status === 401 ? "That token is not valid." : error.message;
    }
  });
  $("signout").addEventListener("click", () => guard(async () => {
    await signOut();
    showSignIn("Signed out.");
  }));
  whenSignedOut(() => showSignIn("Your session has ended; sign in again."));
}

function wireSearch() {
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const params = new URLSearchParams({ q: $("q").value });
    if ($("source-type").value) params.set("from", $("source-type").value);
    navigate(`#/search?${params}`);
  });
  // "/" focuses the search box from anywhere but a text field, as on most search pages.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    const typing = target.closest && target.closest("input, textarea, select, [contenteditable]");
    if (typing && !typing.closest("[hidden]")) return;
    if ($("app").hidden) return;
    event.preventDefault();
    $("q").focus();
    $("q").select();
  });
}

async function start() {
  wireSession();
  wireSearch();
  wireDocumentView(navigate, guard);
  wireEditor(navigate, guard);
  wireUpload(() => guard(loadTree));
  wireSync(guard);
  window.addEventListener("hashchange", route);
  try {
    if (await currentSession()) showSignedIn();
    else showSignIn();
  } catch (error) {
    showSignIn(`The server did not answer: ${error.message}`);
  }
}

start();
