// Cancel, resume, resolve, re-run, delete and purge: each asks for confirmation in a modal dialog, sends
// the call, and shows the API's problem+json answer readably inside the dialog
// when it refuses (409 for a run that moved on, 422 for a bad body, ...).

import { api, describeProblem } from "./api.js";
import { h } from "./dom.js";

function parseJson(text, label) {
  if (text.trim() === "") return { value: undefined };
  try {
    return { value: JSON.parse(text) };
  } catch (error) {
    return { error: `${label} is not valid JSON: ${error.message}` };
  }
}

/**
 * Open the confirm dialog; resolves true once `send(fields)` succeeded, false if
 * the person backed out. `send` may throw ApiError or return {error} to keep it open.
 */
function confirmDialog({ title, text, okLabel, fields = [], send }) {
  const dialog = document.getElementById("confirm");
  const form = document.getElementById("confirm-form");
  const problem = document.getElementById("confirm-error");
  const ok = document.getElementById("confirm-ok");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-fields").replaceChildren(...fields);
  ok.textContent = okLabel;
  problem.hidden = true;
  return new Promise((resolve) => {
    const close = (result) => {
      form.removeEventListener("submit", onSubmit);
      back.removeEventListener("click", onBack);
      dialog.removeEventListener("cancel", onBack);
      dialog.close();
      resolve(result);
    };
    const onSubmit = async (event) => {
      event.preventDefault();
      ok.disabled = true;
      try {
        const outcome = await send();
        if (outcome && outcome.error) throw new Error(outcome.error);
        close(true);
      } catch (error) {
        problem.textContent = describeProblem(error);
        problem.hidden = false;
      } finally {
        ok.disabled = false;
      }
    };
    const onBack = (event) => {
      if (event) event.preventDefault();
      close(false);
    };
    const back = document.getElementById("confirm-cancel");
    form.addEventListener("submit", onSubmit);
    back.addEventListener("click", onBack);
    dialog.addEventListener("cancel", onBack);
    dialog.showModal();
    (fields.length ? fields[0].querySelector("textarea, select, input") : ok)?.focus();
  });
}

function field(id, label, control, hint) {
  return h("div", { class: "field" }, h("label", { for: id }, label), control,
    hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null);
}

export function cancelRun(run) {
  return confirmDialog({
    title: `Cancel ${run.id}?`,
    text: run.status === "queued"
      ? "It has not started: it is cancelled at once."
      : "Its worker stops it within one heartbeat; if the worker is dead, the reconciler ends it.",
    okLabel: "Cancel run",
    send: () => api("POST", `/runs/${encodeURIComponent(run.id)}/cancel`),
  });
}

export function resumeRun(run) {
  const input = h("textarea", { id: "resume-input", rows: 5, spellcheck: "false",
    "aria-describedby": "resume-input-hint" });
  return confirmDialog({
    title: `Resume ${run.id}?`,
    text: "The run is queued again (fence + 1) and its handler gets the input as ctx.resume_input.",
    okLabel: "Resume run",
    fields: [field("resume-input", "Input (JSON, optional)", input,
      'For example {"answer": "use the backup CRM"}. Empty sends no input.')],
    send: () => {
      const parsed = parseJson(input.value, "The input");
      if (parsed.error) return parsed;
      const body = parsed.value === undefined ? {} : { input: parsed.value };
      return api("POST", `/runs/${encodeURIComponent(run.id)}/resume`, body);
    },
  });
}

export function resolveRun(run) {
  const action = h("select", { id: "resolve-action" },
    h("option", { value: "retry" }, "retry: queue it again"),
    h("option", { value: "fail" }, "fail: end it failed"),
    h("option", { value: "succeed" }, "succeed: end it succeeded"));
  const outcome = h("select", { id: "resolve-outcome" },
    h("option", { value: "" }, "not stated"),
    h("option", { value: "applied" }, "applied: it happened, never repeat it"),
    h("option", { value: "not_applied" }, "not applied: it did not happen, run it again"));
  const result = h("textarea", { id: "resolve-result", rows: 3, spellcheck: "false" });
  const output = h("textarea", { id: "resolve-output", rows: 3, spellcheck: "false" });
  const note = h("input", { id: "resolve-note", maxlength: 2000 });
  return confirmDialog({
    title: `Resolve ${run.id}?`,
    text: "A side effect started and nobody knows whether it happened. Say what you found out.",
    okLabel: "Resolve run",
    fields: [
      field("resolve-action", "Decision", action),
      field("resolve-outcome", "The side effect's outcome (required to retry)", outcome),
      field("resolve-result", "Its result, when applied (JSON, optional)", result),
      field("resolve-output", "The run's output, to succeed (JSON, optional)", output),
      field("resolve-note", "Note for the history (optional)", note),
    ],
    send: () => {
      const body = { action: action.value };
      if (outcome.value) body.effect_outcome = outcome.value;
      for (const [name, control, label] of [["effect_result", result, "The result"],
        ["output", output, "The output"]]) {
        const parsed = parseJson(control.value, label);
        if (parsed.error) return parsed;
        if (parsed.value !== undefined) body[name] = parsed.value;
      }
      if (note.value.trim()) body.note = note.value.trim();
      return api("POST", `/runs/${encodeURIComponent(run.id)}/resolve`, body);
    },
  });
}

export function retryRun(run) {
  const checkpoint = h("select", { id: "retry-checkpoint" },
    h("option", { value: "keep" }, "keep: start from its last checkpoint"),
    h("option", { value: "drop" }, "drop: start from the beginning"));
  return confirmDialog({
    title: `Re-run ${run.id}?`,
    text: `It ended ${run.status}; it stays as it ended. A new run with the same input is ` +
      "queued, linked to this one; side effects this run recorded are replayed, not repeated.",
    okLabel: "Re-run",
    fields: [field("retry-checkpoint", "Checkpoint", checkpoint)],
    send: async () => {
      const created = await api("POST", `/runs/${encodeURIComponent(run.id)}/retry`,
        { checkpoint: checkpoint.value });
      location.hash = `#/runs/${encodeURIComponent(created.id)}`;
      return created;
    },
  });
}

export function deleteRun(run) {
  return confirmDialog({
    title: `Delete ${run.id}?`,
    text: `The run ended ${run.status}. Its record, events, effects and idempotency key ` +
      "are removed now instead of when its retention ends. This cannot be undone.",
    okLabel: "Delete run",
    send: () => api("DELETE", `/runs/${encodeURIComponent(run.id)}`),
  });
}

export function drainWorker(worker) {
  return confirmDialog({
    title: `Drain ${worker.id}?`,
    text: "It stops claiming at its next heartbeat, lets its running runs finish for its " +
      "drain timeout, releases the rest to other workers, and exits (as on SIGTERM).",
    okLabel: "Drain worker",
    send: () => api("POST", `/workers/${encodeURIComponent(worker.id)}/drain`),
  });
}

// cancels in flight at once in a bulk cancel: a few, not one per selected row
const BULK_PARALLEL = 4;

/**
 * One call per run after one confirmation, BULK_PARALLEL at a time; resolves to
 * {done, refused} counts (a run that moved on answers 409: refused), or null if
 * the person backed out.
 */
async function bulk(ids, { title, text, okLabel, call }) {
  let outcome = null;
  const done = await confirmDialog({
    title, text, okLabel,
    send: async () => {
      const counts = { done: 0, refused: 0 };
      const queue = [...ids];
      const next = async () => {
        for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
          try {
            await call(id);
            counts.done += 1;
          } catch (error) {
            if (error.status === 401) throw error;
            counts.refused += 1;
          }
        }
      };
      await Promise.all(Array.from({ length: BULK_PARALLEL }, next));
      outcome = counts;
      return null;
    },
  });
  return done ? outcome : null;
}

const runs = (n) => `${n} run${n === 1 ? "" : "s"}`;

export function cancelRuns(ids) {
  return bulk(ids, {
    title: `Cancel ${runs(ids.length)}?`,
    text: "Queued and parked runs are cancelled at once; running ones by their worker " +
      "within one heartbeat. Runs that already ended are left as they are.",
    okLabel: "Cancel runs",
    call: (id) => api("POST", `/runs/${encodeURIComponent(id)}/cancel`),
  });
}

export function deleteRuns(ids) {
  return bulk(ids, {
    title: `Delete ${runs(ids.length)}?`,
    text: "Finished runs are deleted now with their events, effects and idempotency key; " +
      "runs that have not finished are left as they are. This cannot be undone.",
    okLabel: "Delete runs",
    call: (id) => api("DELETE", `/runs/${encodeURIComponent(id)}`),
  });
}

export function retryRuns(ids) {
  return bulk(ids, {
    title: `Re-run ${runs(ids.length)}?`,
    text: "Each failed, orphaned, cancelled or expired run gets a new linked run from its " +
      "last checkpoint; effects it recorded are replayed, not repeated. Runs re-run " +
      "already are left as they are.",
    okLabel: "Re-run runs",
    call: (id) => api("POST", `/runs/${encodeURIComponent(id)}/retry`),
  });
}

/** The RFC 3339 time of a datetime-local value (the browser's zone), or "" for none. */
function instant(value) {
  return value ? new Date(value).toISOString() : "";
}

/**
 * Purge the finished runs the filters match, batch after batch until the API says
 * done; resolves to the number deleted, or null if the person backed out.
 */
export async function purgeRuns(filters, terminal) {
  const before = h("input", { id: "purge-before", type: "datetime-local",
    "aria-describedby": "purge-before-hint" });
  const named = Object.entries(filters).filter(([, value]) => value)
    .map(([name, value]) => `${name} ${value}`).join(", ");
  let deleted = 0;
  const done = await confirmDialog({
    title: "Purge finished runs?",
    text: `Deletes every finished run (${[...terminal].join(", ")}) ` +
      `${named ? `matching ${named}` : "on every queue"}, with its events and ` +
      "idempotency key. Queued, running and parked runs are never touched. " +
      "This cannot be undone.",
    okLabel: "Purge runs",
    fields: [field("purge-before", "Finished before (optional)", before,
      "Only runs that finished before this time, in your time zone.")],
    send: async () => {
      const body = {};
      for (const [name, value] of Object.entries(filters)) if (value) body[name] = value;
      if (before.value) body.finished_before = instant(before.value);
      deleted = 0;
      for (;;) {
        const page = await api("POST", "/runs/purge", body);
        deleted += page.deleted;
        if (page.done) return null;
        body.cursor = page.next_cursor;
      }
    },
  });
  return done ? deleted : null;
}
