// Words for what happened to a run: one line per event, and the plain story of a
// lost lease ("worker w-3 stopped renewing at 12:01:07; its lease ran out at
// 12:01:10; orphaned by the reconciler"). The same wording as the CLI's app/render.py
// where they overlap: an orphaned run reads "orphaned: executor lease expired".
// What a run waits for is told from the one table of wait kinds (wait_kinds.json, which
// the CLI's app/wait_kinds.py reads too), by the rules its `about` states.

export const TERMINAL = new Set(["succeeded", "failed", "cancelled", "orphaned", "expired"]);
export const PARKED = new Set(["waiting_human", "reconciliation_required"]);
// events a handler writes; everything else is a lifecycle transition
export const HANDLER_EVENTS = new Set(["token", "progress", "wait", "verdict", "note"]);

/** Epoch ms or ISO string → local wall-clock time, to the second. */
export function clock(value) {
  if (value === null || value === undefined || value === "") return "?";
  const date = typeof value === "number" ? new Date(value) : new Date(value);
  // h23, not hour12: false, which some locales render as "24:05:07" after midnight
  return date.toLocaleTimeString([], { hourCycle: "h23" });
}

/** A duration in ms as a short human string: 850 ms, 4.2 s, 3 min 5 s, 2 h 4 min. */
export function duration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function seconds(value) {
  return value === null || value === undefined ? "?" : `${Number(value).toFixed(1)} s`;
}

/** How a lost lease was found: who stopped renewing when, and when it ran out. */
export function lostLease(evidence) {
  const owner = evidence.owner_id || "its worker";
  const renewed = evidence.last_renewed_at_ms
    ? `stopped renewing at ${clock(evidence.last_renewed_at_ms)}`
    : "never renewed";
  const expired = evidence.lease_expires_at_ms
    ? `its lease ran out at ${clock(evidence.lease_expires_at_ms)}`
    : "its lease ran out";
  return `worker ${owner} ${renewed}; ${expired}`;
}

/** The plain story of an orphaned, requeued, released or cancelled-by-reconciler run. */
export function story(type, data) {
  const detected = (evidence) =>
    evidence.detected_at_ms ? ` at ${clock(evidence.detected_at_ms)}` : "";
  if (type === "orphaned") {
    const evidence = (data.error && data.error.details) || {};
    return `${lostLease(evidence)}; orphaned by the reconciler${detected(evidence)}`;
  }
  if (type === "lease_expired") {
    return `${lostLease(data)}; taken back by the reconciler${detected(data)}`;
  }
  if (type === "requeued") {
    const why = data.reason === "lease_expired" ? "after the lost lease" : `(${data.reason})`;
    return `put back in the queue ${why} for attempt ${data.attempt}`;
  }
  if (type === "released") {
    return `worker ${data.owner_id} released it (${data.reason}): another worker can take it now`;
  }
  if (type === "cancelled" && data.reason === "owner_lost") {
    const evidence = data.evidence || {};
    return `${lostLease(evidence)}; cancelled by the reconciler (a cancel was pending)`;
  }
  return null;
}

/**
 * A run's error after its status: "code: message", or the message alone when it already
 * says what its code says (lease_expired, "executor lease expired"), so nothing is said
 * twice; app/render.py's error_words keeps the same rule.
 */
export function errorText(error) {
  const code = (error && error.code) || "error";
  const message = (error && error.message) || "";
  if (!message) return code;
  if (message.toLowerCase().includes(code.replaceAll("_", " "))) return message;
  return `${code}: ${message}`;
}

// said when the table cannot be read: every wait still gets its kind and subject
const FALLBACK_TABLE = {
  kinds: {}, operation: null, blocked_on: { unknown: "{name}" },
  unknown: { title: "Waiting[ on {kind}]", words: "waiting[ on {kind}][ {subject}]" },
};

async function loadWaitKinds() {
  try {
    const response = await fetch(new URL("./wait_kinds.json", import.meta.url));
    if (response.ok) return await response.json();
  } catch {
    // the console still loads; waits read generically
  }
  return FALLBACK_TABLE;
}

const WAIT_KINDS = await loadWaitKinds();
// an optional part, "[ ... ]", or one field, "{name}" / "{name:format}"
const PART = /\[([^[\]]*)\]|\{(\w+)(?::(\w+))?\}/g;
const FIELD = /\{(\w+)(?::\w+)?\}/g;

function present(value) {
  return value !== null && value !== undefined && value !== false && value !== "";
}

function formatted(value, form, names) {
  if (!present(value)) return "?";
  if (typeof value === "string" && Object.hasOwn(names, value)) return names[value];
  const number = typeof value === "number" ? value : null;
  if (form === "clock" && number !== null) return clock(number);
  if (form === "duration_ms" && number !== null) return duration(number);
  if (form === "duration_s" && number !== null) return duration(number * 1000);
  if (form === "json") return JSON.stringify(value);
  return String(value);
}

/** A template of the wait table with data's fields in it (app/wait_kinds.py's fill). */
export function fill(template, data, names = {}) {
  return template.replace(PART, (match, optional, field, form) => {
    if (optional !== undefined) {
      const inside = [...optional.matchAll(FIELD)].map((found) => found[1]);
      return inside.every((name) => present(data[name])) ? fill(optional, data, names) : "";
    }
    return formatted(data[field], form, Object.hasOwn(names, field) ? names[field] : {});
  });
}

/** The table's entry for one wait: an operation's by its fields, else by its kind. */
export function waitEntry(data) {
  const operation = WAIT_KINDS.operation;
  if (operation && operation.match_fields.every((field) => present(data[field]))) {
    return operation;
  }
  const kind = String(data.kind);
  return Object.hasOwn(WAIT_KINDS.kinds, kind) ? WAIT_KINDS.kinds[kind] : WAIT_KINDS.unknown;
}

/** A wait (a `wait` event's data, or a parked run's waiting_for) in words. */
export function waitText(data) {
  const entry = waitEntry(data);
  const chosen = (entry.variants || []).find((variant) => present(data[variant.when])) || entry;
  return fill(chosen.words, data, { ...(entry.names || {}), ...(chosen.names || {}) });
}

/** The wait's short title: the heading of its banner on the run's page. */
export function waitTitle(data) {
  return fill(waitEntry(data).title, data);
}

/** The epoch ms a wait ends by at the latest, when its kind has a deadline; else null. */
export function waitDeadline(data) {
  const field = waitEntry(data).deadline;
  return field && typeof data[field] === "number" ? data[field] : null;
}

/** A queued run's blocked_on (k:tenant-a, b:v2, …) in words. */
export function blockedOnText(resource) {
  const blocked = WAIT_KINDS.blocked_on;
  const colon = resource.indexOf(":");
  const kind = colon > 0 ? resource.slice(0, colon) : "";
  if (kind && kind !== "unknown" && Object.hasOwn(blocked, kind)) {
    return fill(blocked[kind], { name: resource.slice(colon + 1) });
  }
  return fill(blocked.unknown, { name: resource });
}

const DESCRIBE = {
  created: (d) => `created: handler ${d.handler} on queue ${d.queue}` +
    (d.retry_of ? `, re-run of ${d.retry_of}` : ""),
  claimed: (d) => `claimed by ${d.owner_id} (attempt ${d.attempt})`,
  progress: (d) => `progress ${JSON.stringify(d)}`,
  cancel_requested: (d) => `cancel requested (owner ${d.owner_id})`,
  checkpoint: (d) => `checkpoint ${d.seq} (${d.size_bytes} bytes)`,
  effect: (d) => `effect ${d.key} ${d.phase}`,
  wait: waitText,
  verdict: (d) =>
    `watchdog on ${d.kind} ${d.subject}: ${d.verdict} (${d.reason}) after ${d.renewals} renewals` +
    (d.evaluator ? `, by ${d.evaluator}` : ""),
  waiting_human: (d) => d.reason === "ask_human"
    ? `asks a person: ${JSON.stringify(d.question)}`
    : `waiting for a person: ${d.reason || "escalated"}`,
  signal: (d) => d.delivered
    ? `signal ${d.name} delivered: the run wakes`
    : `signal ${d.name} kept for a later wait (${d.pending} unread)`,
  resumed: (d) => `resumed by a person with input ${JSON.stringify(d.input)}`,
  reconciliation_required: (d) => `needs a person: ${errorText(d.error)}`,
  resolved: (d) => `resolved by a person: ${d.action}` +
    (d.effect_outcome ? `, effects ${d.effect_outcome}` : "") + (d.note ? ` (${d.note})` : ""),
  replay_unavailable: (d) =>
    `history before ${d.oldest_available} was trimmed; showing what remains`,
  succeeded: () => "succeeded",
  failed: (d) => `failed: ${errorText(d.error)}`,
  orphaned: (d) => `orphaned: ${errorText(d.error)}`,
  cancelled: (d) => `cancelled (${d.reason || "requested"})`,
  expired: (d) => `expired: nobody claimed it within its queued time-to-live` +
    (d.queued_for_ms != null ? ` (queued ${d.queued_for_ms / 1000} s)` : ""),
};

/**
 * One readable line for an event (token events are rendered as flowing text instead).
 * An orphaned run's line is its error's words ("orphaned: executor lease expired"); the
 * story of its lost lease is the run view's banner and the runs table's reason.
 */
export function describe(event) {
  const told = event.type === "orphaned" ? null : story(event.type, event.data || {});
  if (told) return `${event.type}: ${told}`;
  const render = DESCRIBE[event.type];
  return render ? render(event.data || {}) : `${event.type} ${JSON.stringify(event.data)}`;
}

/** Why a run is where it is, from its record alone (for the runs table). */
export function reasonOf(run) {
  const error = run.error;
  if (!error) return "";
  if (run.status === "orphaned" && error.details) {
    return `${errorText(error)}: ${story("orphaned", { error })}`;
  }
  return errorText(error);
}
