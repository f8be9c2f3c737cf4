// Small DOM helpers: build elements without innerHTML (nothing from the API is
// ever parsed as HTML), status badges, and a server-clock offset for ages.

/** h("td", {class: "x"}, child, "text") → an element; attributes starting "on" are listeners. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function badge(status) {
  return h("span", { class: `badge status-${status}`, "data-status": status }, status);
}

/** Pretty JSON in a collapsible block. */
export function jsonBlock(label, value, { open = false } = {}) {
  const text = value === undefined ? "null" : JSON.stringify(value, null, 2);
  return h("details", { class: "json", open },
    h("summary", {}, label), h("pre", { tabindex: "0" }, h("code", {}, text)));
}

let offsetMs = 0;

/** Remember how far the API's clock is from this browser's (GET /config's `now`). */
export function syncClock(serverNowIso) {
  offsetMs = Date.parse(serverNowIso) - Date.now();
}

/** Now, by the API's clock, in epoch ms. */
export function serverNow() {
  return Date.now() + offsetMs;
}

/** A connection indicator: "live", "reconnecting…", or an error. */
export function connectionText(state) {
  if (state === "live") return "live";
  if (state === "connecting") return "connecting…";
  if (state === "reconnecting") return "connection lost, reconnecting…";
  if (state === "stopped") return "";
  return `stream refused: ${state.message}`;
}

/**
 * Call `read` now and every `everyMs` after each one ends, showing connection
 * problems in `status`; a 401 stops it (the key prompt takes over). Returns the
 * view's cleanup: stop polling.
 */
export function pollEvery(everyMs, status, read) {
  let stopped = false;
  let timer = null;
  const poll = async () => {
    try {
      await read(() => stopped);
      status.textContent = "";
    } catch (error) {
      status.textContent = connectionText(error);
      if (error.status === 401) return;
    }
    if (!stopped) timer = setTimeout(poll, everyMs);
  };
  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
