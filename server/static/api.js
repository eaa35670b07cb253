// The API client: the key from sessionStorage in the Authorization header, errors from the API's
// {"error": {code, message}} bodies, and server-sent events read from a POST response.

const KEY_NAME = "docqa.apiKey";
const MAX_EVENT_CHARS = 8 * 1024 * 1024;

export class ApiError extends Error {
  /** @param {number} status @param {string} code @param {string} message */
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getKey() {
  return sessionStorage.getItem(KEY_NAME);
}

export function setKey(key) {
  sessionStorage.setItem(KEY_NAME, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_NAME);
}

function headers(extra = {}) {
  const key = getKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // A proxy's HTML error page: fall back to the status line.
  }
  const error = body && typeof body === "object" ? body.error : null;
  if (error && typeof error === "object") {
    return new ApiError(response.status, String(error.code || "error"), String(error.message || response.statusText));
  }
  return new ApiError(response.status, `http_${response.status}`, `the server answered ${response.status} ${response.statusText}`);
}

async function send(path, init) {
  try {
    return await fetch(path, { ...init, cache: "no-store", credentials: "omit" });
  } catch {
    throw new ApiError(0, "network_error", "the server cannot be reached");
  }
}

/**
 * Call the API and return its JSON body.
 * @param {string} path e.g. "/v1/me"
 * @param {{method?: string, json?: unknown, form?: FormData}} [options]
 */
export async function api(path, { method = "GET", json, form } = {}) {
  const init = { method, headers: headers() };
  if (json !== undefined) {
    init.headers = headers({ "Content-Type": "application/json" });
    init.body = JSON.stringify(json);
  } else if (form) {
    init.body = form;
  }
  const response = await send(path, init);
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null; // a DELETE with nothing to say
  return response.json();
}

/**
 * POST a JSON body and call `onEvent(name, data)` for every server-sent event of the response.
 * @param {string} path
 * @param {unknown} body
 * @param {(name: string, data: any) => void} onEvent
 */
export async function apiStream(path, body, onEvent) {
  const response = await send(path, {
    method: "POST",
    headers: headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
    body: JSON.stringify(body),
  });
  if (!response.ok) throw await failure(response);
  if (!response.body) throw new ApiError(0, "stream_unsupported", "this browser cannot read streamed responses");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      dispatch(buffer.slice(0, end), onEvent);
      buffer = buffer.slice(end + 2);
    }
    if (buffer.length > MAX_EVENT_CHARS) throw new ApiError(0, "stream_error", "an event of the stream is too large");
    if (done) break;
  }
  if (buffer.trim()) dispatch(buffer, onEvent);
}

function dispatch(block, onEvent) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  let parsed;
  try {
    parsed = JSON.parse(data.join("\n"));
  } catch {
    throw new ApiError(0, "stream_error", `the server sent an unreadable '${name}' event`);
  }
  onEvent(name, parsed);
}
