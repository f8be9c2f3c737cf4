// The run view: the run's fields, input and output, actions, and its event
// timeline streamed live (GET /runs/{id}/events, resumed with Last-Event-ID after a
// dropped connection). Token events flow into one block of text. A wait banner is
// up from a `wait` event until something answers it: progress, a token, the
// watchdog's verdict, or the end of the run.

import { api, follow, streamToken } from "./api.js";
import { cancelRun, deleteRun, resolveRun, resumeRun, retryRun } from "./actions.js";
import { Attempts } from "./attempts.js";
import { Family } from "./family.js";
import {
  blockedOnText, clock, describe, duration, HANDLER_EVENTS, PARKED, story, TERMINAL, waitDeadline,
  waitEntry, waitText, waitTitle,
} from "./describe.js";
import { badge, connectionText, h, jsonBlock, serverNow } from "./dom.js";

// what ends every wait: the operation moved, or the run moved on
const CLEARS_ALL_WAITS = new Set(["token", "progress", "claimed", "released", "lease_expired",
  "requeued", "waiting_human", "reconciliation_required", ...TERMINAL]);

// first start to the end (or now), across attempts and parks: the run's whole time
function runDuration(run) {
  const first = run.first_started_at || run.started_at;
  if (!first) return null;
  const end = run.finished_at ? Date.parse(run.finished_at) : serverNow();
  return `${duration(end - Date.parse(first))}${run.finished_at ? "" : " so far"}`;
}

// a linked run (retry_of / retried_by) as a link to its page, or nothing
function runLink(id) {
  return id ? h("a", { href: `#/runs/${encodeURIComponent(id)}`, class: "mono" }, id) : null;
}

function fields(run) {
  const row = (name, value) => [h("dt", {}, name), h("dd", {}, value ?? "—")];
  const at = (iso) => (iso ? `${clock(iso)} (${new Date(iso).toISOString()})` : null);
  return h("dl", { class: "fields" },
    row("Status", badge(run.status)),
    row("Handler", run.handler),
    row("Queue", run.queue),
    row("Attempt", `${run.attempt} of ${run.max_attempts} (on lease expiry: ${run.on_lease_expired})`),
    row("Owner", run.owner_id ? h("span", { class: "mono" }, run.owner_id) : null),
    row("Fence", String(run.fence)),
    row("Lease expires", at(run.lease_expires_at)),
    row("Created", at(run.created_at)),
    row("First started", at(run.first_started_at || run.started_at)),
    row("This attempt started", at(run.started_at)),
    row("Finished", at(run.finished_at)),
    row("Duration", runDuration(run)),
    row("Cancel requested", at(run.cancel_requested_at)),
    row("Idempotency key", run.idempotency_key),
    row("Re-run of", runLink(run.retry_of)),
    row("Re-run as", runLink(run.retried_by)),
    row("Parent", runLink(run.parent_id)),
    row("Top-level run", run.root_id && run.root_id !== run.id ? runLink(run.root_id) : null),
    row("Priority", String(run.priority ?? 0)),
    row("Concurrency key", run.concurrency_key),
    row("Singleton key", run.singleton_key),
    row("Waiting for", waitingFor(run)));
}

// what a run waits for, from its record: a parked run's wait (with a person's question),
// else the limit its queued lane is held back by (GET /runs/{id} says which while queued)
function waitingFor(run) {
  if (run.waiting_for && (run.status === "waiting" || run.status === "waiting_human")) {
    const question = run.escalation && run.escalation.reason === "ask_human"
      ? { question: run.escalation.question } : {};
    return waitText({ ...run.waiting_for, ...question });
  }
  return run.blocked_on ? blockedOnText(run.blocked_on) : null;
}

// a banner per wait, keyed as a verdict names the operation it ends
function waitKey(data) {
  return `${data.kind} ${data.subject ?? data.key ?? data.what ?? ""}`;
}

// the handler's question to a person (ctx.ask_human), as the run's record keeps it
function question(run) {
  const escalation = run.escalation || {};
  return escalation.reason === "ask_human" ? ` — ${JSON.stringify(escalation.question)}` : "";
}

function actionButtons(run, after) {
  const buttons = [];
  const add = (label, act) => buttons.push(h("button", { type: "button",
    onclick: async () => { if (await act(run)) after(); } }, label));
  if (["queued", "running", "waiting", "waiting_human", "reconciliation_required"]
    .includes(run.status)) {
    add("Cancel…", cancelRun);
  }
  if (run.status === "waiting_human") add("Resume…", resumeRun);
  if (run.status === "reconciliation_required") add("Resolve…", resolveRun);
  if (["failed", "orphaned", "cancelled", "expired"].includes(run.status) && !run.retried_by) {
    add("Re-run…", retryRun);
  }
  if (TERMINAL.has(run.status)) {
    buttons.push(h("button", { type: "button", onclick: async () => {
      if (await deleteRun(run)) location.hash = "#/runs";
    } }, "Delete…"));
  }
  return buttons;
}

class WaitBanners {
  constructor(element) {
    this.element = element;
    this.waits = new Map();
  }

  wait(event) {
    this.waits.set(waitKey(event.data), { data: event.data, since: serverNow() });
    this.draw();
  }

  clear(key) {
    if (key === undefined) this.waits.clear();
    else this.waits.delete(key);
    this.draw();
  }

  draw() {
    for (const [key, { data }] of this.waits) {
      // a wait nothing else ends (a rate limit's token) is over when its deadline comes
      const deadline = waitDeadline(data);
      if (waitEntry(data).ends_at_deadline && deadline !== null && deadline <= serverNow()) {
        this.waits.delete(key);
      }
    }
    const items = [...this.waits.values()].map(({ data, since }) => {
      // a field that grows while the wait lasts (an operation's elapsed time) is kept live
      const grows = waitEntry(data).grows;
      const shown = grows
        ? { ...data, [grows]: Number(data[grows] || 0) + (serverNow() - since) / 1000 }
        : data;
      const deadline = waitDeadline(data);
      const left = deadline !== null && deadline > serverNow()
        ? ` (${duration(deadline - serverNow())} from now)` : "";
      return h("div", { class: "wait", "data-kind": data.kind,
        "data-subject": data.subject ?? data.key ?? "" },
      h("strong", {}, waitTitle(shown)), ` — ${waitText(shown)}${left}.`);
    });
    this.element.replaceChildren(...items);
    this.element.hidden = items.length === 0;
  }
}

class Timeline {
  constructor(list) {
    this.list = list;
    this.tokens = null;
  }

  add(event) {
    if (event.type === "token") {
      if (!this.tokens) {
        this.tokens = h("p", { class: "tokens" });
        this.list.append(h("li", { class: "event event-tokens", "data-type": "token" },
          h("span", { class: "type" }, "tokens"), this.tokens));
      }
      this.tokens.append(String((event.data && event.data.text) ?? ""));
      return;
    }
    this.tokens = null;
    const terminal = TERMINAL.has(event.type);
    this.list.append(h("li", { class: `event${terminal ? " terminal" : ""}`,
      "data-type": event.type, "data-verdict": event.data?.verdict },
    h("time", { datetime: event.ts }, clock(event.ts)),
    h("span", { class: "type" }, event.type),
    h("span", { class: "text" }, describe(event)),
    h("span", { class: "fence" }, `fence ${event.fence}`)));
  }
}

export function renderRun(root, runId) {
  const title = h("h1", {}, "Run ", h("span", { class: "mono" }, runId));
  const outcome = h("p", { class: "story", role: "status", "aria-live": "polite", hidden: true });
  const waitBanner = h("section", { class: "banner wait-banner", role: "status",
    "aria-live": "polite", "aria-label": "Operations waiting", hidden: true });
  const parked = h("section", { class: "banner parked", role: "status", hidden: true });
  const actions = h("div", { class: "actions", role: "group", "aria-label": "Actions" });
  const problem = h("p", { class: "problem", role: "alert", hidden: true });
  const details = h("div", { class: "details" });
  const connection = h("p", { class: "connection", role: "status" });
  // the live region wraps the list: a role on the <ol> itself would take away its list
  // semantics, and its items would no longer be read as items of a list
  const list = h("ol", { class: "timeline" });
  const attemptsSection = h("section", { class: "attempts", "aria-labelledby": "attempts-title",
    hidden: true });
  const familySection = h("section", { class: "family", "aria-labelledby": "children-title",
    hidden: true });
  root.replaceChildren(
    h("p", {}, h("a", { href: "#/runs" }, "← All runs")), title, outcome, waitBanner, parked,
    actions, problem, details,
    familySection,
    attemptsSection,
    h("section", { "aria-labelledby": "events-title" },
      h("h2", { id: "events-title" }, "Events"), connection,
      h("div", { role: "log", "aria-label": "Events" }, list)));

  const banners = new WaitBanners(waitBanner);
  const timeline = new Timeline(list);
  const attempts = new Attempts(attemptsSection);
  const family = new Family(familySection, runId);
  let lastParkedReason = "";
  let run = null;

  const showRun = () => {
    document.title = `${run.id} (${run.status}) · Leasehold`;
    title.replaceChildren("Run ", h("span", { class: "mono" }, run.id), " ", badge(run.status));
    actions.replaceChildren(...actionButtons(run, load));
    details.replaceChildren(fields(run), jsonBlock("Input", run.input, { open: true }),
      jsonBlock("Output", run.output, { open: run.output !== null }),
      run.error ? jsonBlock(`Error: ${run.error.code}`, run.error, { open: true }) : "");
    parked.hidden = !PARKED.has(run.status);
    parked.textContent = run.status === "waiting_human"
      ? `Waiting for a person: ${lastParkedReason || "the watchdog escalated"}` +
        `${question(run)}. Resume it below.`
      : run.status === "reconciliation_required"
        ? `Needs a person: ${run.error ? run.error.message : ""}. Resolve it below.`
        : "";
  };

  // one GET at a time; an event that arrives during it asks for one more after it,
  // so the last event always leads to a read that started after it
  let loading = false;
  let again = false;
  const load = async () => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    try {
      run = await api("GET", `/runs/${encodeURIComponent(runId)}`);
      problem.hidden = true;
      showRun();
      family.refresh(run);
    } catch (error) {
      problem.textContent = error.status === 404
        ? `There is no run ${runId} (it may have expired).`
        : `Could not load the run: ${error.message}`;
      problem.hidden = false;
    } finally {
      loading = false;
    }
    if (again) {
      again = false;
      load();
    }
  };

  const onEvent = ({ data: event }) => {
    timeline.add(event);
    attempts.add(event);
    if (event.type === "wait") banners.wait(event);
    else if (event.type === "verdict") banners.clear(`${event.data.kind} ${event.data.subject}`);
    else if (CLEARS_ALL_WAITS.has(event.type)) banners.clear();
    if (event.type === "waiting_human") lastParkedReason = event.data.reason || "";
    const told = story(event.type, event.data || {});
    if (told) {
      outcome.textContent = `${event.type === "orphaned" ? "Orphaned" : "What happened"}: ${told}.`;
      outcome.hidden = false;
    }
    // a durable wait parks the run, a limit's wait says what its lane waits on: both
    // change the record, though the handler's other events do not
    if (!HANDLER_EVENTS.has(event.type) || (event.type === "wait" &&
      waitEntry(event.data || {}).changes_record)) load();
    return TERMINAL.has(event.type);
  };

  load();
  const stream = follow(`/runs/${encodeURIComponent(runId)}/events`, {
    token: () => streamToken(runId),
    onMessage: onEvent,
    onState: (state) => { connection.textContent = connectionText(state); },
  });
  const ticker = setInterval(() => {
    if (!waitBanner.hidden) banners.draw();
    if (attempts.running) attempts.draw();
  }, 500);

  return () => {
    clearInterval(ticker);
    family.stop();
    stream.stop();
  };
}
