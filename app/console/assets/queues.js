// The queues view: every declared queue (GET /queues) with what it holds now, and
// its last hour minute by minute (GET /queues/{name}/series) as three small bar
// charts: runs finished, failures, and expired leases (orphans and takeovers).
// Counts are polled every 2 s; the series every 10 s (they move by the minute).

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
    h("td", { class: "num", "data-field": "parked" }, queue.parked),
    h("td", { class: "num", "data-field": "oldest" },
      queue.ready ? duration(queue.oldest_queued_age_s * 1000) : "—"),
    h("td", { class: "num" }, bytes(queue.memory_bytes)),
    charts(series));
}

export function renderQueues(root) {
  const status = h("p", { class: "connection", role: "status" });
  const body = h("tbody", {}, h("tr", {}, h("td", { colspan: 8, class: "empty loading" },
    "Loading queues…")));
  root.replaceChildren(h("h1", {}, "Queues"),
    h("p", { class: "hint" }, "What each declared queue holds now (updated every 2 s), " +
      "and its last hour, one bar per minute."),
    status,
    h("div", { class: "table-wrap", tabindex: "0", role: "region",
      "aria-labelledby": "queues-caption" },
    h("table", { class: "queues" },
      h("caption", { id: "queues-caption" }, "Declared queues, updating live"),
      h("thead", {}, h("tr", {}, ["Queue", "Ready", "Running", "Delayed", "Parked",
        "Oldest queued", "Memory", "Last hour"].map((name) => h("th", { scope: "col" }, name)))),
      body)));

  const series = new Map();
  let polls = 0;
  return pollEvery(POLL_MS, status, async (stopped) => {
    const page = await api("GET", "/queues");
    if (polls % SERIES_EVERY === 0 || page.items.some((q) => !series.has(q.name))) {
      const answers = await Promise.all(page.items.map((queue) =>
        api("GET", `/queues/${encodeURIComponent(queue.name)}/series`).catch(() => null)));
      page.items.forEach((queue, index) => series.set(queue.name, answers[index]));
    }
    polls += 1;
    if (stopped()) return;
    body.replaceChildren(...page.items.map((queue) => row(queue, series.get(queue.name))));
    if (page.items.length === 0) {
      body.replaceChildren(h("tr", {}, h("td", { colspan: 8, class: "empty" },
        "No declared queues.")));
    }
  });
}
