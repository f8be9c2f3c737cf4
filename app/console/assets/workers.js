// The workers view: GET /workers with GET /config every second. A worker that
// stopped heartbeating is marked stale as soon as it missed two heartbeats (its
// leases are in danger), and "lease expired" once the API says it is not alive
// (silent longer than the lease TTL); it disappears when its advertisement
// expires. Ages are measured with the API's clock (/config's `now`), not the
// browser's. Each live worker can be drained (POST /workers/{id}/drain). Below them, the
// builds (GET /builds): what each still holds, and "drained" once nothing is pinned to it.

import { drainWorker } from "./actions.js";
import { api } from "./api.js";
import { duration } from "./describe.js";
import { h, pollEvery, serverNow, syncClock } from "./dom.js";

const POLL_MS = 1000;

function health(worker, config) {
  const silence = serverNow() - Date.parse(worker.last_heartbeat_at);
  if (worker.alive === false || silence > config.lease_ttl_ms) {
    return { state: "expired", text: `no heartbeat for ${duration(silence)}: longer than the ` +
      `${duration(config.lease_ttl_ms)} lease TTL, its runs are being reconciled` };
  }
  if (silence > 2 * config.heartbeat_interval_ms) {
    return { state: "stale", text: `no heartbeat for ${duration(silence)} (expected every ` +
      `${duration(config.heartbeat_interval_ms)})` };
  }
  return { state: "live", text: `heartbeat ${duration(silence)} ago` };
}

// the next poll (within a second) shows `draining` once the worker has seen the request
function drainCell(worker, state) {
  if (worker.draining) return h("td", {}, h("span", { class: "badge health-stale" }, "draining"));
  if (state === "expired") return h("td", {}, "—");
  return h("td", {}, h("button", { type: "button", onclick: () => drainWorker(worker) },
    "Drain…"));
}

function row(worker, config) {
  const { state, text } = health(worker, config);
  return h("tr", { "data-worker-id": worker.id, "data-health": state,
    "data-draining": worker.draining ? "true" : "false" },
    h("td", {}, h("span", { class: `badge health-${state}` }, state),
      h("div", { class: "reason" }, text)),
    h("td", { class: "mono" }, worker.id),
    h("td", {}, worker.host),
    h("td", { class: "num" }, worker.pid),
    h("td", {}, worker.queues.join(", ")),
    h("td", { class: "mono" }, worker.build_id || "—"),
    h("td", { class: "num" }, `${worker.running}/${worker.concurrency}`),
    h("td", { class: "num" }, `${Number(worker.loop_lag_ms).toFixed(1)} ms`),
    h("td", {}, new Date(worker.last_heartbeat_at).toLocaleTimeString([], { hour12: false })),
    drainCell(worker, state));
}

function buildRow(build) {
  const state = build.drained ? "drained" : "in use";
  const approx = build.pinned.estimated ? "~" : "";
  return h("tr", { "data-build-id": build.build_id, "data-drained": String(build.drained) },
    h("td", { class: "mono" }, build.build_id),
    h("td", {}, h("span", { class: `badge ${build.drained ? "health-live" : "health-stale"}` },
      state)),
    h("td", { class: "num" }, build.workers.length),
    h("td", { class: "num" }, build.running_now),
    h("td", { class: "num" }, `${approx}${build.pinned.queued}`),
    h("td", { class: "num" }, `${approx}${build.pinned.running}`),
    h("td", { class: "num" }, `${approx}${build.pinned.parked}`),
    h("td", { class: "num" }, build.unavailable));
}

export function renderWorkers(root) {
  const status = h("p", { class: "connection", role: "status" });
  const summary = h("p", { class: "hint" });
  const body = h("tbody");
  const builds = h("tbody");
  root.replaceChildren(h("h1", {}, "Workers"), summary, status,
    h("div", { class: "table-wrap", tabindex: "0", role: "region",
      "aria-labelledby": "workers-caption" },
    h("table", { class: "workers" },
      h("caption", { id: "workers-caption" }, "Live executors and their last heartbeat"),
      h("thead", {}, h("tr", {}, ["Health", "Worker", "Host", "PID", "Queues", "Build",
        "Running", "Loop lag", "Last heartbeat", "Drain"].map((name) =>
        h("th", { scope: "col" }, name)))),
      body)),
    h("h2", {}, "Builds"),
    h("div", { class: "table-wrap", tabindex: "0", role: "region",
      "aria-labelledby": "builds-caption" },
    h("table", { class: "builds" },
      h("caption", { id: "builds-caption" },
        "Each build's workers and the runs pinned to it; drained: its workers can be stopped"),
      h("thead", {}, h("tr", {}, ["Build", "State", "Workers", "Running now", "Pinned queued",
        "Pinned running", "Pinned parked", "Unavailable"].map((name) =>
        h("th", { scope: "col" }, name)))),
      builds)));

  return pollEvery(POLL_MS, status, async () => {
    const config = await api("GET", "/config");
    syncClock(config.now);
    const workers = await api("GET", "/workers");
    summary.textContent = `Lease TTL ${duration(config.lease_ttl_ms)}; workers heartbeat ` +
      `every ${duration(config.heartbeat_interval_ms)}. Updated every second.`;
    body.replaceChildren(...workers.map((worker) => row(worker, config)));
    if (workers.length === 0) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 10, class: "empty" },
        "No live workers: start one with `leasehold worker`.")));
    }
    const known = await api("GET", "/builds");
    builds.replaceChildren(...known.map(buildRow));
  });
}
