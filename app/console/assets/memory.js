// The memory banner: while Redis memory is past LEASEHOLD_MEMORY_HIGH_WATER the API
// refuses new runs (503 admission-refused); the console says so on every view,
// from GET /readyz, polled every few seconds. Running runs are not affected.

import { api } from "./api.js";

const POLL_MS = 5000;

function percent(used, max) {
  return `${Math.round((100 * used) / max)} %`;
}

/** What the banner says for a /readyz body, or "" when creates are accepted. */
export function memoryNotice(ready) {
  const memory = ready && ready.memory;
  if (!memory || !memory.creates_refused) return "";
  return (
    `New runs are refused: Redis memory is ${percent(memory.used_bytes, memory.max_bytes)} ` +
    `of maxmemory, past the high-water mark of ${Math.round(memory.high_water * 100)} %. ` +
    "Running runs still finish; creates are accepted again once memory frees."
  );
}

/** Keep `banner` in step with /readyz until the page goes away. */
export function watchMemory(banner, login) {
  async function poll() {
    if (login.open) return; // no key yet: asking again would only re-open the prompt
    let ready;
    try {
      ready = await api("GET", "/readyz");
    } catch (error) {
      ready = error.problem; // 503 not ready still carries the report
    }
    const text = memoryNotice(ready);
    banner.textContent = text;
    banner.hidden = !text;
  }
  poll();
  setInterval(poll, POLL_MS);
}
