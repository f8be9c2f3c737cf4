// The runs view: recent runs in a table, kept current by GET /activity (the
// queues' activity streams over SSE). The stream is opened first; its `ready`
// message says "from here on nothing is missed", and only then is the list
// loaded. Each activity entry carries the event's id in the run's own stream, so
// an entry older than the row it would update (or a fetched run older than an
// entry already applied) is recognised and ignored: nothing goes backwards.

import { cancelRuns, deleteRuns, purgeRuns, retryRuns } from "./actions.js";
import { api, follow } from "./api.js";
import { duration, reasonOf, TERMINAL } from "./describe.js";
import { badge, connectionText, h, serverNow } from "./dom.js";

const STATUSES = [
  "queued", "running", "cancelling", "waiting", "waiting_human", "reconciliation_required",
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

const RUN_ID = /^[A-Za-z0-9_-]{1,64}\.[0-9A-HJKMNP-TV-Z]{26}$/;
const METADATA_PAIR = /^([A-Za-z0-9_-]{1,64})=(.{0,256})$/;

function filtersFrom(params) {
  return {
    status: params.get("status") || "",
    queue: params.get("queue") || "",
    handler: params.get("handler") || "",
    metadata: params.get("metadata") || "",
  };
}

/** "tenant=acme, region=eu" → [["tenant", "acme"], ["region", "eu"]]; null if malformed. */
function metadataPairs(text) {
  const pairs = [];
  for (const part of text.split(",").map((item) => item.trim()).filter(Boolean)) {
    const match = METADATA_PAIR.exec(part);
    if (!match) return null;
    pairs.push([match[1], match[2]]);
  }
  return pairs;
}

// the API's rule: a string metadata value equals the text, anything else its JSON
function metadataHolds(run, pairs) {
  const metadata = run.metadata || {};
  return pairs.every(([key, value]) => key in metadata && (typeof metadata[key] === "string"
    ? metadata[key] === value : JSON.stringify(metadata[key]) === value));
}

function matches(run, filters) {
  return (!filters.status || run.status === filters.status) &&
    (!filters.queue || run.queue === filters.queue) &&
    (!filters.handler || run.handler === filters.handler) &&
    metadataHolds(run, metadataPairs(filters.metadata) || []);
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
    h("div", { class: "field" },
      h("label", { for: "filter-metadata" }, "Metadata"),
      h("input", { id: "filter-metadata", name: "metadata", value: filters.metadata,
        placeholder: "tenant=acme, region=eu", size: 22, "aria-describedby": "metadata-hint" })),
    h("div", { class: "field" },
      h("label", { for: "find-id" }, "Run id"),
      h("input", { id: "find-id", name: "id", placeholder: "default.01J…", size: 24,
        spellcheck: "false" })),
    h("button", { type: "submit" }, "Apply"),
    h("p", { class: "hint", id: "metadata-hint" },
      "Metadata: key=value pairs, comma-separated; all must hold. A run id opens that run."));
}

function cells(run) {
  const now = serverNow();
  const created = Date.parse(run.created_at);
  // from the first attempt's start: a retried or parked run's time counts whole
  const first = run.first_started_at || run.started_at;
  const started = first ? Date.parse(first) : null;
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

// what POST /runs/{id}/retry takes: an ended run that did not succeed, not re-run yet
const RERUNNABLE = new Set(["failed", "orphaned", "cancelled", "expired"]);
const canRerun = (run) => RERUNNABLE.has(run.status) && !run.retried_by;

export function renderRuns(root, params) {
  const filters = filtersFrom(params);
  const rows = new Map();
  const pending = [];
  const inFlight = new Set();
  const again = new Set();
  let loaded = false;

  const selected = new Set();
  const status = h("p", { class: "connection", role: "status", "aria-live": "polite" });
  const problem = h("p", { class: "problem", role: "alert", hidden: true });
  const body = h("tbody", {}, h("tr", {}, h("td", { colspan: 10, class: "empty loading" },
    "Loading runs…")));
  const pickAll = h("input", { type: "checkbox", "aria-label": "Select every run shown" });
  const bulkCancel = h("button", { type: "button", disabled: true }, "Cancel selected…");
  const bulkDelete = h("button", { type: "button", disabled: true }, "Delete selected…");
  const bulkRetry = h("button", { type: "button", disabled: true }, "Re-run selected…");
  const bulkDone = h("p", { class: "outcome", role: "status", "aria-live": "polite" });
  const table = h("div", { class: "table-wrap", tabindex: "0", role: "region",
    "aria-labelledby": "runs-caption" },
  h("table", { class: "runs" },
    h("caption", { id: "runs-caption" }, "Recent runs, newest first, updating live"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "pick" }, pickAll),
      ["Status", "Run", "Handler", "Queue", "Attempt", "Owner",
        "Fence", "Age", "Duration"].map((name) => h("th", { scope: "col" }, name)))),
    body));
  const formSlot = h("div");
  const purged = h("p", { class: "outcome", role: "status", "aria-live": "polite" });
  // a purge deletes finished runs only: offered unless the filter names another status
  const purge = !filters.status || TERMINAL.has(filters.status)
    ? h("div", { class: "actions" }, h("button", { type: "button", onclick: async () => {
      const deleted = await purgeRuns(filters, TERMINAL);
      if (deleted === null) return;
      purged.textContent = `Purged ${deleted} finished run${deleted === 1 ? "" : "s"}.`;
      load();
    } }, "Purge finished runs…"), purged)
    : "";
  root.replaceChildren(h("h1", {}, "Runs"), formSlot, purge,
    h("div", { class: "actions", role: "group", "aria-label": "Selected runs" }, bulkCancel,
      bulkRetry, bulkDelete, bulkDone),
    status, problem, table);

  const shown = () => [...rows.values()]
    .sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0))
    .slice(0, MAX_ROWS);

  const showSelection = () => {
    for (const id of [...selected]) if (!rows.has(id)) selected.delete(id);
    const picked = [...selected].map((id) => rows.get(id));
    const live = picked.filter((run) => !TERMINAL.has(run.status)).length;
    const ended = picked.length - live;
    bulkCancel.disabled = live === 0;
    bulkCancel.textContent = live ? `Cancel ${live} selected…` : "Cancel selected…";
    const rerunnable = picked.filter(canRerun).length;
    bulkRetry.disabled = rerunnable === 0;
    bulkRetry.textContent = rerunnable ? `Re-run ${rerunnable} selected…` : "Re-run selected…";
    bulkDelete.disabled = ended === 0;
    bulkDelete.textContent = ended ? `Delete ${ended} selected…` : "Delete selected…";
    pickAll.checked = selected.size > 0 && selected.size === Math.min(rows.size, MAX_ROWS);
  };

  const pick = (run) => h("td", { class: "pick" }, h("input", { type: "checkbox",
    checked: selected.has(run.id), "aria-label": `Select ${run.id}`,
    onchange: (event) => {
      if (event.target.checked) selected.add(run.id);
      else selected.delete(run.id);
      showSelection();
    } }));

  const draw = () => {
    if (!loaded) return; // the loading row stays until the first page is in
    const ordered = shown();
    body.replaceChildren(...ordered.map((run) =>
      h("tr", { "data-run-id": run.id, "data-status": run.status }, pick(run), cells(run))));
    if (ordered.length === 0) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 10, class: "empty" },
        "No runs match. New ones appear here as they are created.")));
    }
    showSelection();
  };

  pickAll.addEventListener("change", () => {
    selected.clear();
    if (pickAll.checked) for (const run of shown()) selected.add(run.id);
    draw();
  });

  // each button acts on the selected runs it applies to: cancel the live, delete the ended
  const onSelected = (button, act, verb, wanted) => button.addEventListener("click", async () => {
    const ids = [...selected].filter((id) => wanted(rows.get(id)));
    const outcome = await act(ids);
    if (outcome === null) return;
    bulkDone.textContent = `${verb} ${outcome.done}` +
      (outcome.refused ? `; ${outcome.refused} had moved on or were refused.` : ".");
    selected.clear();
    if (verb === "Deleted" || verb === "Re-ran") load();
    else draw();
  });
  onSelected(bulkCancel, cancelRuns, "Cancelled", (run) => !TERMINAL.has(run.status));
  onSelected(bulkDelete, deleteRuns, "Deleted", (run) => TERMINAL.has(run.status));
  onSelected(bulkRetry, retryRuns, "Re-ran", canRerun);

  const showProblem = (error) => {
    problem.textContent = error ? `Could not load runs: ${error.message}` : "";
    if (error && !loaded) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 10, class: "empty" },
        "Runs could not be loaded (see above).")));
    }
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
    for (const [name, value] of Object.entries(filters)) {
      if (value && name !== "metadata") query.set(name, value);
    }
    for (const [key, value] of metadataPairs(filters.metadata) || []) {
      query.set(`metadata.${key}`, value);
    }
    // the live refresh compares metadata too, so the first page must carry it
    if (filters.metadata) query.set("include", "metadata");
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
        const data = new FormData(form);
        const id = String(data.get("id") || "").trim();
        if (id) {
          if (!RUN_ID.test(id)) {
            showProblem(new Error(`${id} is not a run id (<queue>.<ULID>)`));
            return;
          }
          location.hash = `#/runs/${encodeURIComponent(id)}`;
          return;
        }
        if (metadataPairs(String(data.get("metadata") || "")) === null) {
          showProblem(new Error("metadata filters are key=value pairs, comma-separated; " +
            "keys of letters, digits, _ and -"));
          return;
        }
        const query = new URLSearchParams();
        for (const [name, value] of data) if (value && name !== "id") query.set(name, value);
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
