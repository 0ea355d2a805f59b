// The HTTP API: JSON requests with the bearer key, errors as ApiError, events URLs with a
// run-scoped stream token. Paths are relative, so the viewer also works behind a path prefix.

import { askForKey, currentKey } from "./auth.js";

export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.type = error.type || "http_error";
    this.details = error.details || {};
  }

  /** The field a 422 names, e.g. "settings.max_steps". */
  get field() {
    return this.details.field || this.details.errors?.[0]?.field || null;
  }
}

/** Set from GET /settings, or by the first 401. */
export const auth = { required: false };

export async function request(method, path, body) {
  for (;;) {
    const key = currentKey();
    const headers = { Accept: "application/json" };
    if (key) headers.Authorization = `Bearer ${key}`;
    const init = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (response.status === 401) {
      auth.required = true;
      if (await askForKey(refusal(key, data?.error))) continue;
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

/** Why the dialog asks again: an access token refused says what failed (expired, ...). */
function refusal(key, error) {
  if (!key) return "This server needs an API key. An access token of its identity provider works too.";
  if (error?.type === "invalid_token") {
    return `That access token was refused: ${error.message}. Enter a current one.`;
  }
  return "That API key was refused. Enter a valid one.";
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);

export function runPath(id, rest = "") {
  return `runs/${encodeURIComponent(id)}${rest}`;
}

/**
 * The URL an EventSource follows for run `id`, resuming after `after`. With auth on, it
 * carries a fresh run-scoped stream token (never the API key).
 */
export async function eventsUrl(id, after) {
  const params = new URLSearchParams();
  if (after > 0) params.set("after", String(after));
  if (auth.required || currentKey()) {
    const { token } = await post(runPath(id, "/stream-token"));
    params.set("token", token);
  }
  const query = params.toString();
  return runPath(id, "/events") + (query ? `?${query}` : "");
}
