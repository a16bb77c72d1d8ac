// Sync status and history per source, and "sync now" for editors. A sync runs in the
// server's background; the page polls GET /v1/sync until it is no longer running.
import { allows, api } from "./api.js";
import { $, badge, flash, h } from "./dom.js";

const POLL_MS = 1500;
const POLL_LIMIT = 80;

function when(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

function counts(run) {
  return `${run.added ?? 0} added, ${run.updated ?? 0} updated, ${run.deleted ?? 0} deleted` +
    (run.failures ? `, ${run.failures} failed` : "");
}

function statusCell(run) {
  if (!run) return h("span", { class: "muted" }, "never synced");
  return h("span", { class: `sync-status sync-${run.status}` }, run.status);
}

function historyTable(runs) {
  return h("div", { class: "table-wrap" }, h("table", {},
    h("thead", {}, h("tr", {}, ["Started", "Finished", "Status", "Changes"].map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, runs.map((run) => h("tr", {},
      h("td", {}, when(run.started_at)), h("td", {}, when(run.finished_at)),
      h("td", {}, statusCell(run)), h("td", {}, counts(run)))))));
}

// One collapsible history per source, newest run first; what the reader opened stays open
// while the page polls a running sync.
function historyBySource(runs) {
  if (!runs.length) return [h("p", { class: "muted" }, "No runs yet.")];
  const open = new Set([...document.querySelectorAll("#sync-history details[open]")].map((d) => d.dataset.source));
  const groups = new Map();
  for (const run of runs) {
    const name = run.source || "all sources";
    if (!groups.has(name)) groups.set(name, []);
    groups.get(name).push(run);
  }
  return [...groups].map(([name, list]) => {
    const details = h("details", { class: "history", open: open.has(name) },
      h("summary", {}, name, " ", h("span", { class: "count" }, `${list.length} run${list.length === 1 ? "" : "s"}`)),
      historyTable(list));
    details.dataset.source = name;
    return details;
  });
}

function sourceRow(source, running, trigger) {
  return h("tr", {},
    h("th", { scope: "row" }, source.name), h("td", {}, badge(source.source_type)),
    h("td", {}, source.last_run ? when(source.last_run.finished_at || source.last_run.started_at) : "—"),
    h("td", {}, statusCell(source.last_run)), h("td", {}, source.last_run ? counts(source.last_run) : "—"),
    h("td", {}, when(source.next_due)),
    allows("editor")
      ? h("td", {}, h("button", { type: "button", class: "sync-now", disabled: running,
        "aria-label": `Sync ${source.name} now`, onclick: () => trigger(source.name) }, "Sync now"))
      : null);
}

export function renderSync(status, trigger) {
  const running = Boolean(status.running);
  $("sync-state").textContent = running ? "A sync is running…" : "No sync running.";
  $("sync-all").disabled = running;
  const sources = status.sources || [];
  const headings = ["Source", "Type", "Last run", "Status", "Changes", "Next due"];
  if (allows("editor")) headings.push("Action");
  $("sync-sources").replaceChildren(sources.length === 0 ? h("p", { class: "muted" }, "No sources.") :
    h("div", { class: "table-wrap" }, h("table", { class: "sync-table" },
      h("thead", {}, h("tr", {}, headings.map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, sources.map((source) => sourceRow(source, running, trigger))))));
  $("sync-history").replaceChildren(...historyBySource(status.history || []));
}

let polling = 0;
let guarded = async (work) => work();
const trigger = (source) => guarded(() => startSync(source));

export async function showSync() {
  renderSync(await api("GET", "/v1/sync"), trigger);
}

async function startSync(source) {
  const started = await api("POST", "/v1/sync", source ? { source } : {});
  flash(`Sync ${started.status}${source ? ` for ${source}` : ""} (run ${started.run_id}).`);
  const mine = ++polling;
  for (let attempt = 0; attempt < POLL_LIMIT && mine === polling; attempt += 1) {
    const status = await api("GET", "/v1/sync");
    renderSync(status, trigger);
    // A run still queued is not running yet: follow it until it has finished too.
    const live = (status.history || []).some((run) => run.status === "queued" || run.status === "running");
    if (!status.running && !live) return;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

export function wireSync(guard) {
  guarded = guard;
  $("sync-all").addEventListener("click", () => trigger(null));
}
