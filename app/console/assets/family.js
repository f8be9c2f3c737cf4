// A run's family on its page: the runs it spawned (GET /runs/{id}/children), each
// with its status and a link to its own page. Read again while anything in it may
// still change (the run, or any child, not ended), every FAMILY_POLL_MS.

import { api } from "./api.js";
import { clock, TERMINAL } from "./describe.js";
import { badge, h } from "./dom.js";

const FAMILY_POLL_MS = 2000;
const FAMILY_PAGE = 100; // the first page only: the rest is one link to the tree stream away

function childRow(child) {
  return h("tr", { "data-child-id": child.id },
    h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(child.id)}`, class: "mono" },
      child.id)),
    h("td", {}, badge(child.status)),
    h("td", {}, child.handler),
    h("td", {}, clock(child.created_at)),
    h("td", {}, child.finished_at ? clock(child.finished_at) : "—"));
}

export class Family {
  constructor(section, runId) {
    this.section = section;
    this.runId = runId;
    this.settled = false;
    this.timer = null;
  }

  // read the children now, and again later unless the whole family has ended
  async refresh(run) {
    clearTimeout(this.timer);
    let page;
    try {
      page = await api("GET",
        `/runs/${encodeURIComponent(this.runId)}/children?limit=${FAMILY_PAGE}`);
    } catch {
      this.timer = setTimeout(() => this.refresh(run), FAMILY_POLL_MS);
      return;
    }
    this.draw(page);
    this.settled = TERMINAL.has(run.status) && page.items.every((c) => TERMINAL.has(c.status));
    if (!this.settled) this.timer = setTimeout(() => this.refresh(run), FAMILY_POLL_MS);
  }

  draw(page) {
    this.section.hidden = page.items.length === 0;
    if (this.section.hidden) return;
    const live = page.items.filter((c) => !TERMINAL.has(c.status)).length;
    this.section.replaceChildren(
      h("h2", { id: "children-title" }, `Children (${page.items.length}` +
        `${page.next_cursor ? "+" : ""}, ${live} live)`),
      h("div", { class: "table-wrap" }, h("table", { "aria-labelledby": "children-title" },
        h("thead", {}, h("tr", {}, ...["Run", "Status", "Handler", "Created", "Finished"]
          .map((name) => h("th", { scope: "col" }, name)))),
        h("tbody", {}, ...page.items.map(childRow)))));
  }

  stop() {
    clearTimeout(this.timer);
  }
}
