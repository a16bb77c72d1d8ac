// Passages and documents are text anyone who can write a runbook (or an upload) controls,
// so they are rendered defensively, in two layers: markdown-it with raw HTML off and only
// http(s) links, then DOMPurify with a short allow-list over the result. The output is a
// DOM fragment, never an HTML string assigned to innerHTML by the caller.
import markdownit from "./vendor/markdown-it/markdown-it.esm.min.js";
import DOMPurify from "./vendor/dompurify/purify.es.js";

const SAFE_URL = /^https?:\/\//i;

const md = markdownit({ html: false, linkify: true, typographer: false });
// Images would load from wherever the author points (a tracking pixel); their alt text
// stays as text. Links are kept only when absolute http(s).
md.disable("image");
md.validateLink = (url) => SAFE_URL.test(url.trim());

const ALLOWED_TAGS = [
  "a", "p", "br", "hr", "strong", "em", "s", "del", "code", "pre", "blockquote",
  "ul", "ol", "li", "h1", "h2", "h3", "h4", "h5", "h6",
  "table", "thead", "tbody", "tr", "th", "td",
];

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName !== "A") return;
  const href = node.getAttribute("href") || "";
  if (!SAFE_URL.test(href)) {
    node.removeAttribute("href");
    return;
  }
  node.setAttribute("target", "_blank");
  node.setAttribute("rel", "noopener noreferrer nofollow");
});

export function renderMarkdown(text) {
  return DOMPurify.sanitize(md.render(String(text ?? "")), {
    ALLOWED_TAGS,
    ALLOWED_ATTR: ["href", "title", "class", "start", "target", "rel"],
    ALLOWED_URI_REGEXP: SAFE_URL,
    RETURN_DOM_FRAGMENT: true,
  });
}
