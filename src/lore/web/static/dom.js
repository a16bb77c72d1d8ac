// Elements are built with text nodes and attributes only: nothing the server sends is
// ever parsed as HTML here (Markdown goes through markdown.js).

export function h(tag, props = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") element.className = value;
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function $(id) {
  return document.getElementById(id);
}

export function showOnly(ids, visible) {
  for (const id of ids) $(id).hidden = id !== visible;
}

// What a passage's source type means to a reader: the built-in pack, the team's own
// repositories and wikis, files someone uploaded, notes written here.
const BADGES = {
  vault: ["from vault", "vault"],
  git: ["from your repos", "repo"],
  filesystem: ["from your repos", "repo"],
  confluence: ["from your repos", "repo"],
  upload: ["uploaded", "upload"],
  manual: ["note", "note"],
};

export function badge(sourceType) {
  const [label, kind] = BADGES[sourceType] || [sourceType || "unknown source", "other"];
  return h("span", { class: `badge badge-${kind}`, title: `source type: ${sourceType || "unknown"}` }, label);
}

export function age(days, stale) {
  const text = days === 0 ? "updated today" : days === 1 ? "1 day old" : `${days} days old`;
  const nodes = [h("span", { class: "age" }, text)];
  if (stale) nodes.push(" ", h("span", { class: "stale", title: "older than the stale threshold: check before you act" }, "stale"));
  return nodes;
}

export function docHref(uri) {
  return `#/doc/${encodeURIComponent(uri)}`;
}

let flashTimer = 0;
export function flash(message) {
  $("error").hidden = true;
  $("flash").textContent = message;
  clearTimeout(flashTimer);
  flashTimer = setTimeout(() => ($("flash").textContent = ""), 8000);
}

export function showError(error) {
  const banner = $("error");
  banner.textContent = error instanceof Error ? error.message : String(error);
  banner.hidden = false;
}
