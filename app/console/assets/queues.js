// The queues view: every declared queue (GET /queues) with what it holds now, and
// its last hour minute by minute (GET /queues/{name}/series) as three small bar
// charts: runs finished, failures, and expired leases (orphans and takeovers).
// Counts are polled every 2 s; the series every 10 s (they move by the minute).
// Below them, every schedule (GET /schedules) with its spec, policies, next fire
// time and last run, polled with the counts.

import { api } from "./api.js";
import { barChart } from "./chart.js";
import { duration } from "./describe.js";
import { h, pollEvery } from "./dom.js";

const POLL_MS = 2000;
const SERIES_EVERY = 5; // polls
const FINISHED = ["succeeded", "failed", "cancelled", "orphaned", "expired"];

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function charts(series) {
  if (!series) return h("td", { class: "charts" }, "…");
  const column = (name) => series.buckets.map((bucket) => bucket[name]);
  const finished = series.buckets.map((bucket) =>
    FINISHED.reduce((sum, name) => sum + bucket[name], 0));
  const figure = (label, counts, kind) => h("figure", { class: "chart-box" },
    h("figcaption", {}, `${label} · ${counts.reduce((sum, n) => sum + n, 0)} in the hour`),
    barChart(counts, label, kind));
  return h("td", { class: "charts" }, h("div", { class: "chart-row" },
    figure("Finished / min", finished, "finished"),
    figure("Failed / min", column("failed"), "failed"),
    figure("Orphans (lease expired) / min", column("lease_expired"), "orphans")));
}

function row(queue, series) {
  const link = `#/runs?queue=${encodeURIComponent(queue.name)}`;
  return h("tr", { "data-queue": queue.name },
    h("th", { scope: "row" }, h("a", { href: link }, queue.name)),
    h("td", { class: "num", "data-field": "ready" }, queue.ready),
    h("td", { class: "num", "data-field": "running" }, queue.running),
    h("td", { class: "num", "data-field": "delayed" }, queue.delayed),
    h("td", { class: "num", "data-field": "waiting" }, queue.waiting ?? 0),
    h("td", { class: "num", "data-field": "parked" }, queue.parked),
    h("td", { class: "num", "data-field": "oldest" },
      queue.ready ? duration(queue.oldest_queued_age_s * 1000) : "—"),
    h("td", { class: "num" }, bytes(queue.memory_bytes)),
    charts(series));
}

function when(iso) {
  return iso ? new Date(iso).toISOString().replace(".000Z", "Z") : "—";
}

function scheduleRow(schedule) {
  const spec = schedule.cron
    ? `${schedule.cron} (${schedule.timezone})` : `every ${schedule.interval_s} s`;
  const last = schedule.last_run_id
    ? h("a", { href: `#/runs/${encodeURIComponent(schedule.last_run_id)}` }, "last run") : "—";
  return h("tr", { "data-schedule": schedule.id },
    h("th", { scope: "row" }, schedule.id),
    h("td", {}, schedule.queue),
    h("td", { class: "mono" }, spec),
    h("td", {}, `${schedule.overlap} / ${schedule.missed}`),
    h("td", { "data-field": "next-fire" }, schedule.paused ? "paused" : when(schedule.next_fire_at)),
    h("td", {}, last),
    h("td", { class: "num" },
      `${schedule.fired_count} / ${schedule.skipped_count} / ${schedule.missed_count}`));
}

function schedulesTable(body) {
  return h("div", { class: "table-wrap", tabindex: "0", role: "region",
    "aria-labelledby": "schedules-caption" },
  h("table", { class: "schedules" },
    h("caption", { id: "schedules-caption" }, "Schedules and their next fire times"),
    h("thead", {}, h("tr", {}, ["Schedule", "Queue", "Spec", "Overlap / missed", "Next fire",
      "Last run", "Fired / skipped / missed"].map((name) => h("th", { scope: "col" }, name)))),
    body));
}

export function renderQueues(root) {
  const status = h("p", { class: "connection", role: "status" });
  const body = h("tbody", {}, h("tr", {}, h("td", { colspan: 9, class: "empty loading" },
    "Loading queues…")));
  const schedulesBody = h("tbody", {}, h("tr", {}, h("td", { colspan: 7, class: "empty loading" },
    "Loading schedules…")));
  root.replaceChildren(h("h1", {}, "Queues"),
    h("p", { class: "hint" }, "What each declared queue holds now (updated every 2 s), " +
      "and its last hour, one bar per minute."),
    status,
    h("div", { class: "table-wrap", tabindex: "0", role: "region",
      "aria-labelledby": "queues-caption" },
    h("table", { class: "queues" },
      h("caption", { id: "queues-caption" }, "Declared queues, updating live"),
      h("thead", {}, h("tr", {}, ["Queue", "Ready", "Running", "Delayed", "Waiting", "Parked",
        "Oldest queued", "Memory", "Last hour"].map((name) => h("th", { scope: "col" }, name)))),
      body)),
    h("h2", {}, "Schedules"),
    schedulesTable(schedulesBody));

  const series = new Map();
  let polls = 0;
  return pollEvery(POLL_MS, status, async (stopped) => {
    const [page, schedules] = await Promise.all([
      api("GET", "/queues"), api("GET", "/schedules?limit=200").catch(() => null)]);
    if (polls % SERIES_EVERY === 0 || page.items.some((q) => !series.has(q.name))) {
      const answers = await Promise.all(page.items.map((queue) =>
        api("GET", `/queues/${encodeURIComponent(queue.name)}/series`).catch(() => null)));
      page.items.forEach((queue, index) => series.set(queue.name, answers[index]));
    }
    polls += 1;
    if (stopped()) return;
    body.replaceChildren(...page.items.map((queue) => row(queue, series.get(queue.name))));
    if (page.items.length === 0) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 9, class: "empty" },
        "No declared queues.")));
    }
    if (schedules) {
      schedulesBody.replaceChildren(...(schedules.items.length
        ? schedules.items.map(scheduleRow)
        : [h("tr", {}, h("td", { colspan: 7, class: "empty" }, "No schedules."))]));
    }
  });
}
