// A run's attempts as a history, derived from its event stream (no extra API
// call, no extra write on the hot path): each `claimed` event opens an attempt
// (owner, fence, attempt number, start), and the next lifecycle event that takes
// the lease away closes it and says how it ended: released (drain), lease_expired
// (its worker went silent), requeued (a retryable failure), parked for a person,
// or a terminal status.

import { clock, describe, duration, PARKED, TERMINAL } from "./describe.js";
import { h, serverNow } from "./dom.js";

const ENDS = new Set(["released", "lease_expired", "requeued", ...PARKED, ...TERMINAL]);

export class Attempts {
  constructor(section) {
    this.section = section;
    this.rows = [];
    this.open = null;
  }

  add(event) {
    if (event.type === "claimed") {
      this.open = { number: event.data?.attempt ?? this.rows.length + 1, fence: event.fence,
        owner: event.data?.owner_id || "?", start: Date.parse(event.ts), end: null, how: null };
      this.rows.push(this.open);
    } else if (this.open && ENDS.has(event.type)) {
      this.open.end = Date.parse(event.ts);
      this.open.how = { type: event.type, text: describe(event) };
      this.open = null;
    } else {
      return;
    }
    this.draw();
  }

  draw() {
    const now = serverNow();
    const body = this.rows.map((row) => h("tr", { "data-fence": row.fence,
      "data-ended": row.how ? row.how.type : "running" },
    h("td", { class: "num" }, row.number),
    h("td", { class: "mono" }, row.owner),
    h("td", { class: "num" }, row.fence),
    h("td", {}, clock(row.start)),
    h("td", {}, row.end === null ? "—" : clock(row.end)),
    h("td", { class: "num" }, duration((row.end ?? now) - row.start)),
    h("td", {}, row.how ? [h("strong", {}, row.how.type), " ", row.how.text] : "running")));
    this.section.replaceChildren(h("h2", { id: "attempts-title" }, "Attempts"),
      h("div", { class: "table-wrap", tabindex: "0", role: "region",
        "aria-labelledby": "attempts-title" },
      h("table", { class: "attempts" },
        h("thead", {}, h("tr", {}, ["#", "Owner", "Fence", "Started", "Ended", "Took",
          "How it ended"].map((name) => h("th", { scope: "col" }, name)))),
        h("tbody", {}, body))));
    this.section.hidden = this.rows.length === 0;
  }

  /** Whether an attempt is still open (its "took" moves with the clock). */
  get running() {
    return this.open !== null;
  }
}
