// The /v1 API as the page uses it. The session lives in the HttpOnly cookie the server sets;
// the page keeps only the CSRF token, in memory (never localStorage), and sends it on every
// write, as the contract requires of cookie-authenticated non-GET requests.

const ROLES = ["viewer", "editor", "admin"];

export const session = { name: null, role: null, csrf: null, unauthenticated: false };

export function allows(needed) {
  return session.role !== null && ROLES.indexOf(session.role) >= ROLES.indexOf(needed);
}

export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title;
  }
}

// Called on a 401 from any request: the session expired or was revoked.
let onSignedOut = () => {};
export function whenSignedOut(callback) {
  onSignedOut = callback;
}

function remember(body) {
  session.name = body.name;
  session.role = body.role;
  session.csrf = body.csrf_token;
  session.unauthenticated = Boolean(body.unauthenticated);
}

export function forget() {
  session.name = session.role = session.csrf = null;
  session.unauthenticated = false;
}

function writeHeaders(method) {
  return method === "GET" || session.csrf === null ? {} : { "X-CSRF-Token": session.csrf };
}

// A problem document (RFC 9457) becomes an ApiError carrying its detail; anything else
// (a proxy's HTML error page) becomes its status line, never its body.
export async function errorFrom(response) {
  let title = response.statusText;
  let detail = "";
  if ((response.headers.get("content-type") || "").includes("json")) {
    try {
      const body = await response.json();
      title = body.title || title;
      detail = typeof body.detail === "string" ? body.detail : "";
    } catch {
      /* an unreadable error body: the status says enough */
    }
  }
  return new ApiError(response.status, title, detail);
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json", ...writeHeaders(method) };
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401 && path !== "/v1/session") onSignedOut();
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

export async function currentSession() {
  try {
    remember(await api("GET", "/v1/session"));
    return true;
  } catch (error) {
    if (error.status === 401) return false;
    throw error;
  }
}

export async function signIn(token) {
  remember(await api("POST", "/v1/session", { token }));
}

export async function signOut() {
  try {
    await api("DELETE", "/v1/session");
  } finally {
    forget();
  }
}

export function documentPath(uri) {
  return `/v1/documents/${encodeURIComponent(uri)}`;
}

// One file per request so each has its own progress and its own error. XMLHttpRequest,
// because fetch reports no upload progress.
export function uploadFile(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/documents");
    xhr.withCredentials = true;
    xhr.setRequestHeader("Accept", "application/json");
    if (session.csrf !== null) xhr.setRequestHeader("X-CSRF-Token", session.csrf);
    xhr.responseType = "text";
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    xhr.addEventListener("load", () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch {
        /* not JSON: reported by status below */
      }
      if (xhr.status >= 200 && xhr.status < 300 && body) {
        resolve(body);
        return;
      }
      if (xhr.status === 401) onSignedOut();
      const detail = body && typeof body.detail === "string" ? body.detail : "";
      reject(new ApiError(xhr.status, (body && body.title) || xhr.statusText, detail));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, "Network error", "the upload did not reach the server")));
    const form = new FormData();
    form.append("file", file, file.name);
    xhr.send(form);
  });
}
