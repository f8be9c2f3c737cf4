// Talking to the Leasehold API: JSON calls, problem+json errors, and event streams
// read with fetch (EventSource cannot send an Authorization header). The key lives
// in sessionStorage (this tab only) and only ever travels in that header. A run's own
// event stream carries no key at all: the page asks for a short-lived stream token
// (POST /runs/{id}/stream-token) and opens the stream with ?access_token=, which reads
// that run and nothing else. fetch rather than EventSource, because a run's events are
// named by type and EventSource has no listener for every name.

const KEY_STORAGE = "leasehold.apiKey";
const DEFAULT_RETRY_MS = 2000;
const MAX_RETRY_MS = 30_000;

let authHandler = () => {};

/** Called with the ApiError whenever the API answers 401. */
export function onAuthRequired(handler) {
  authHandler = handler;
}

export function getKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function setKey(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
}

export function clearKey() {
  sessionStorage.removeItem(KEY_STORAGE);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra = {}) {
  const all = { ...extra };
  const key = getKey();
  if (key) all.Authorization = `Bearer ${key}`;
  return all;
}

async function toError(response) {
  let problem;
  try {
    problem = await response.json();
  } catch {
    problem = { title: response.statusText || "Error", status: response.status };
  }
  const error = new ApiError(response.status, problem);
  if (response.status === 401) authHandler(error);
  return error;
}

/** One JSON call; resolves to the body, rejects with ApiError (status 0: unreachable). */
export async function api(method, path, body) {
  const init = { method, headers: headers({ Accept: "application/json" }), cache: "no-store" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, { title: "The API did not answer", detail: String(error) });
  }
  if (!response.ok) throw await toError(response);
  return response.status === 204 ? null : response.json();
}

/** A problem+json error as one or more readable lines. */
export function describeProblem(error) {
  if (!(error instanceof ApiError)) return String(error);
  const problem = error.problem || {};
  const head = error.status ? `${problem.title || "Error"} (HTTP ${error.status})` : problem.title;
  const lines = [problem.detail ? `${head}: ${problem.detail}` : head];
  for (const item of problem.errors || []) {
    const where = (item.loc || []).filter((part) => part !== "body").join(".");
    lines.push(where ? `${where}: ${item.msg}` : item.msg);
  }
  return lines.join("\n");
}

function parseBlock(lines) {
  const message = { id: undefined, event: "message", data: [], retry: undefined };
  for (const line of lines) {
    if (line.startsWith(":")) continue; // keep-alive comment
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") message.data.push(value);
    else if (field === "event") message.event = value;
    else if (field === "id") message.id = value;
    else if (field === "retry" && /^\d+$/.test(value)) message.retry = Number(value);
  }
  return message;
}

/**
 * How long to wait before reconnect number `failures` (1 for the first), in ms.
 *
 * Full jitter, as in the server's and the Python client's one retry policy
 * (app/retry.py): drawn from 0 up to the server's `retry:` hint doubled with each
 * failed attempt, at most 30 s. Every console an API restart cut off would
 * otherwise come back in the same instant, and again after each wait.
 */
export function reconnectDelayMs(hintMs, failures, random = Math.random) {
  const ceiling = Math.min(MAX_RETRY_MS, hintMs * 2 ** Math.min(Math.max(failures - 1, 0), 20));
  return random() * ceiling;
}

/**
 * Follow an SSE endpoint with fetch, reconnecting with Last-Event-ID (after a jittered wait).
 *
 * onMessage({event, id, data}) gets each message with data parsed as JSON; it
 * returns true to stop following (e.g. after a run's terminal event). onState
 * gets "connecting" | "live" | "reconnecting" | "stopped" | an ApiError.
 */
export function follow(path, { onMessage, onState = () => {}, lastEventId = null, token = null }) {
  let stopped = false;
  let current = null; // the stream token in use, when `token` gives them
  let tokenWorked = false; // a 401 after it worked is an expiry: a new token, not an error
  let controller = null;
  let retryMs = DEFAULT_RETRY_MS;
  let failures = 0; // reconnects since the stream was last live
  let lastId = lastEventId;

  const stop = () => {
    stopped = true;
    if (controller) controller.abort();
    onState("stopped");
  };

  const deliver = (lines) => {
    const message = parseBlock(lines);
    if (message.retry !== undefined) retryMs = message.retry;
    if (message.id) lastId = message.id;
    if (message.data.length === 0) return false;
    const data = JSON.parse(message.data.join("\n"));
    return onMessage({ event: message.event, id: message.id, data }) === true;
  };

  const readBody = async (response) => {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let block = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += value;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      for (const line of lines) {
        if (line !== "") {
          block.push(line);
          continue;
        }
        const finished = block.length > 0 && deliver(block);
        block = [];
        if (finished) {
          reader.cancel().catch(() => {});
          return true;
        }
      }
    }
  };

  const connectOnce = async () => {
    controller = new AbortController();
    const extra = { Accept: "text/event-stream" };
    if (lastId) extra["Last-Event-ID"] = lastId;
    let url = path;
    if (token) {
      current = current || (await token());
      url = `${path}${path.includes("?") ? "&" : "?"}access_token=${encodeURIComponent(current)}`;
    }
    const response = await fetch(url, {
      // a token stream sends no key: the token is its only credential
      headers: token ? extra : headers(extra),
      signal: controller.signal,
      cache: "no-store",
    });
    if (!response.ok) {
      const error = await toError(response);
      if (token && response.status === 401 && tokenWorked) {
        current = null; // it expired: the next attempt asks for a new one
        tokenWorked = false;
        throw error;
      }
      // a client error will not fix itself by retrying: report it and stop
      if (response.status < 500) {
        stopped = true;
        onState(error);
        return;
      }
      throw error;
    }
    onState("live");
    tokenWorked = true;
    failures = 0;
    if (await readBody(response)) stop();
  };

  const loop = async () => {
    onState("connecting");
    while (!stopped) {
      try {
        await connectOnce();
      } catch (error) {
        if (stopped) return;
      }
      if (stopped) return;
      onState("reconnecting");
      failures += 1;
      await new Promise((resolve) => setTimeout(resolve, reconnectDelayMs(retryMs, failures)));
    }
  };
  loop();
  return { stop, lastId: () => lastId };
}

/** A stream token for one run's events (its tree too with `tree`), asked for with the key. */
export async function streamToken(runId, { tree = false } = {}) {
  const answer = await api("POST", `/runs/${encodeURIComponent(runId)}/stream-token`, { tree });
  return answer.token;
}
