// The runs view: recent runs in a table, kept current by GET /activity (the
// queues' activity streams over SSE). The stream is opened first; its `ready`
// message says "from here on nothing is missed", and only then is the list
// loaded. Each activity entry carries the event's id in the run's own stream, so
// an entry older than the row it would update (or a fetched run older than an
// entry already applied) is recognised and ignored: nothing goes backwards.

import { purgeRuns } from "./actions.js";
import { api, follow } from "./api.js";
import { duration, reasonOf, TERMINAL } from "./describe.js";
import { badge, connectionText, h, serverNow } from "./dom.js";

const STATUSES = [
  "queued", "running", "cancelling", "waiting_human", "reconciliation_required",
  "succeeded", "failed", "cancelled", "orphaned", "expired",
];
const PAGE = 50;
const MAX_ROWS = 200;

function eventOrder(id) {
  const [ms, seq] = (id || "0-0").split("-");
  return [Number(ms), Number(seq || 0)];
}

/** Whether stream id a is after stream id b. */
function newer(a, b) {
  const [am, as] = eventOrder(a);
  const [bm, bs] = eventOrder(b);
  return am > bm || (am === bm && as > bs);
}

function filtersFrom(params) {
  return {
    status: params.get("status") || "",
    queue: params.get("queue") || "",
    handler: params.get("handler") || "",
  };
}

function matches(run, filters) {
  return (!filters.status || run.status === filters.status) &&
    (!filters.queue || run.queue === filters.queue) &&
    (!filters.handler || run.handler === filters.handler);
}

function filterForm(filters, handlers) {
  const select = (name, label, options) =>
    h("div", { class: "field" },
      h("label", { for: `filter-${name}` }, label),
      h("select", { id: `filter-${name}`, name },
        h("option", { value: "" }, "any"),
        options.map((value) => h("option", { value, selected: value === filters[name] }, value))));
  return h("form", { class: "filters", role: "search", "aria-label": "Filter runs" },
    select("status", "Status", STATUSES),
    h("div", { class: "field" },
      h("label", { for: "filter-queue" }, "Queue"),
      h("input", { id: "filter-queue", name: "queue", value: filters.queue,
        pattern: "[A-Za-z0-9_\\-]{1,64}", placeholder: "all", size: 12 })),
    select("handler", "Handler", handlers),
    h("button", { type: "submit" }, "Apply"));
}

function cells(run) {
  const now = serverNow();
  const created = Date.parse(run.created_at);
  const started = run.started_at ? Date.parse(run.started_at) : null;
  const finished = run.finished_at ? Date.parse(run.finished_at) : null;
  const reason = reasonOf(run);
  return [
    h("td", {}, badge(run.status), reason ? h("div", { class: "reason" }, reason) : null),
    h("td", {}, h("a", { href: `#/runs/${run.id}`, class: "mono" }, run.id)),
    h("td", {}, run.handler),
    h("td", {}, run.queue),
    h("td", { class: "num" }, `${run.attempt}/${run.max_attempts}`),
    h("td", { class: "mono" }, run.owner_id || "—"),
    h("td", { class: "num" }, run.fence),
    h("td", { class: "num" }, duration(now - created)),
    h("td", { class: "num" }, started ? duration((finished || now) - started) : "—"),
  ];
}

export function renderRuns(root, params) {
  const filters = filtersFrom(params);
  const rows = new Map();
  const pending = [];
  const inFlight = new Set();
  const again = new Set();
  let loaded = false;

  const status = h("p", { class: "connection", role: "status", "aria-live": "polite" });
  const problem = h("p", { class: "problem", role: "alert", hidden: true });
  const body = h("tbody");
  const table = h("div", { class: "table-wrap", tabindex: "0", role: "region",
    "aria-labelledby": "runs-caption" },
  h("table", { class: "runs" },
    h("caption", { id: "runs-caption" }, "Recent runs, newest first, updating live"),
    h("thead", {}, h("tr", {}, ["Status", "Run", "Handler", "Queue", "Attempt", "Owner",
      "Fence", "Age", "Duration"].map((name) => h("th", { scope: "col" }, name)))),
    body));
  const formSlot = h("div");
  const purged = h("p", { class: "connection", role: "status", "aria-live": "polite" });
  // a purge deletes finished runs only: offered unless the filter names another status
  const purge = !filters.status || TERMINAL.has(filters.status)
    ? h("div", { class: "actions" }, h("button", { type: "button", onclick: async () => {
      const deleted = await purgeRuns(filters, TERMINAL);
      if (deleted === null) return;
      purged.textContent = `Purged ${deleted} finished run${deleted === 1 ? "" : "s"}.`;
      load();
    } }, "Purge finished runs…"), purged)
    : "";
  root.replaceChildren(h("h1", {}, "Runs"), formSlot, purge, status, problem, table);

  const draw = () => {
    const ordered = [...rows.values()]
      .sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0))
      .slice(0, MAX_ROWS);
    body.replaceChildren(...ordered.map((run) =>
      h("tr", { "data-run-id": run.id, "data-status": run.status }, cells(run))));
    if (ordered.length === 0) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 9, class: "empty" },
        "No runs match. New ones appear here as they are created.")));
    }
  };

  const showProblem = (error) => {
    problem.textContent = error ? `Could not load runs: ${error.message}` : "";
    problem.hidden = !error;
  };

  // one GET per run at a time; an entry that arrives during it asks for one more
  const refresh = async (id) => {
    if (inFlight.has(id)) {
      again.add(id);
      return;
    }
    inFlight.add(id);
    try {
      const run = await api("GET", `/runs/${encodeURIComponent(id)}`);
      const row = rows.get(id);
      if (!row || !newer(row.last_event_id, run.last_event_id)) {
        if (matches(run, filters)) rows.set(id, run);
        else rows.delete(id);
        draw();
      }
    } catch (error) {
      if (error.status === 404) rows.delete(id);
    } finally {
      inFlight.delete(id);
    }
    if (again.delete(id)) refresh(id);
  };

  const apply = (entry) => {
    const row = rows.get(entry.run_id);
    if (row && !newer(entry.event_id, row.last_event_id)) return;
    if (row && entry.status) {
      // show the new status at once; the refresh fills in owner, error, times
      Object.assign(row, { status: entry.status, fence: entry.fence,
        last_event_id: entry.event_id });
      if (!matches(row, filters)) rows.delete(entry.run_id);
      draw();
    }
    refresh(entry.run_id);
  };

  const load = async () => {
    const query = new URLSearchParams({ limit: String(PAGE) });
    for (const [name, value] of Object.entries(filters)) if (value) query.set(name, value);
    try {
      const page = await api("GET", `/runs?${query}`);
      rows.clear();
      for (const run of page.items) rows.set(run.id, run);
      loaded = true;
      showProblem(null);
      draw();
      pending.splice(0).forEach((entry) => refresh(entry.run_id));
    } catch (error) {
      showProblem(error);
    }
  };

  const onMessage = ({ event, data }) => {
    if (event === "ready" || event === "replay_unavailable") {
      load();
    } else if (event === "activity") {
      if (loaded) apply(data);
      else pending.push(data);
    }
    return false;
  };

  const path = filters.queue ? `/activity?queue=${encodeURIComponent(filters.queue)}` : "/activity";
  const stream = follow(path, {
    onMessage,
    onState: (state) => { status.textContent = connectionText(state); },
  });

  api("GET", "/handlers")
    .then((list) => list.map((item) => item.name))
    .catch(() => [])
    .then((names) => {
      const form = filterForm(filters, names);
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        const query = new URLSearchParams();
        for (const [name, value] of new FormData(form)) if (value) query.set(name, value);
        location.hash = `#/runs${query.size ? `?${query}` : ""}`;
      });
      formSlot.replaceChildren(form);
    });

  // ages and durations of running runs move with the clock, not with events
  const ticker = setInterval(() => {
    if ([...rows.values()].some((run) => !TERMINAL.has(run.status))) draw();
  }, 1000);

  return () => {
    clearInterval(ticker);
    stream.stop();
  };
}
