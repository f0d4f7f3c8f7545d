// The console's only way to the Relay API: the JSON routes with `Authorization: Bearer`, never a cookie.
// The secret lives in this tab's sessionStorage: closing the tab signs out, other tabs and sites never see it.

const SECRET = "relay.console.secret";
const ROLE = "relay.console.role";

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }

  // No answer, or an answer that says "later" (a restart, an overload): worth asking again, unlike a refusal.
  get transient() {
    return this.status === 0 || this.status === 429 || this.status >= 500;
  }
}

export function session() {
  const secret = sessionStorage.getItem(SECRET);
  const role = sessionStorage.getItem(ROLE);
  return secret && role ? { secret, role } : null;
}

export function signOut() {
  sessionStorage.removeItem(SECRET);
  sessionStorage.removeItem(ROLE);
}

// Which kind of secret this is: a caller's (relay key or inference token) or the admin token. The batch list
// accepts only the first, the admin routes only the second; the first refusal is the one reported.
export async function signIn(secret) {
  try {
    await call("/v1/batches", { query: { limit: 1 }, secret });
    return remember(secret, "caller");
  } catch (callerError) {
    if (!(callerError instanceof ApiError) || callerError.status !== 401) throw callerError;
    try {
      await call("/admin/batches", { query: { limit: 1 }, secret });
    } catch (adminError) {
      if (adminError instanceof ApiError && adminError.status === 401) throw callerError;
      throw adminError;
    }
    return remember(secret, "admin");
  }
}

function remember(secret, role) {
  sessionStorage.setItem(SECRET, secret);
  sessionStorage.setItem(ROLE, role);
  return { secret, role };
}

// One call to the API. Answers 4xx/5xx become ApiError with the API's stable code and message. BODY is JSON text,
// or a FormData (a multipart upload: the browser writes its Content-Type with the boundary).
export async function call(path, { method = "GET", query, body, secret, raw = false } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const headers = { Authorization: `Bearer ${secret || (session() || {}).secret || ""}` };
  if (body !== undefined && !(body instanceof FormData)) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, { method, headers, body, cache: "no-store", credentials: "omit" });
  } catch (err) {
    throw new ApiError(0, "api_unreachable", `cannot reach Relay: ${err.message}`);
  }
  if (!response.ok) throw await errorOf(response);
  return raw ? response : response.json();
}

async function errorOf(response) {
  try {
    const { error } = await response.json();
    return new ApiError(response.status, error.code, error.message, error.details);
  } catch {
    return new ApiError(response.status, "http_error", `HTTP ${response.status}`);
  }
}
