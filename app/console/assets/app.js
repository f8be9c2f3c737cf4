// The console's entry point: routes by URL fragment (#/runs, #/runs/<id>,
// #/queues, #/workers), asks for an API key whenever the API answers 401, and re-renders the
// current view once a key is given.

import { api, clearKey, getKey, onAuthRequired, setKey } from "./api.js";
import { syncClock } from "./dom.js";
import { watchMemory } from "./memory.js";
import { renderQueues } from "./queues.js";
import { renderRun } from "./run.js";
import { renderRuns } from "./runs.js";
import { renderWorkers } from "./workers.js";

const main = document.getElementById("main");
const login = document.getElementById("login");
const loginForm = document.getElementById("login-form");
const loginMessage = document.getElementById("login-message");
const loginKey = document.getElementById("login-key");
const forget = document.getElementById("forget-key");

let cleanup = () => {};

function parseRoute() {
  const fragment = location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = fragment.split("?");
  const parts = path.split("/").filter(Boolean);
  if (parts[0] === "runs" && parts[1]) return { view: "run", id: decodeURIComponent(parts[1]) };
  if (parts[0] === "workers") return { view: "workers" };
  if (parts[0] === "queues") return { view: "queues" };
  return { view: "runs", params: new URLSearchParams(query) };
}

function markNavigation(view) {
  for (const link of document.querySelectorAll("[data-nav]")) {
    const current = link.dataset.nav === (view === "run" ? "runs" : view);
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function route({ focus = false } = {}) {
  cleanup();
  const target = parseRoute();
  markNavigation(target.view);
  forget.hidden = !getKey();
  document.title = "Leasehold console";
  if (target.view === "run") cleanup = renderRun(main, target.id);
  else if (target.view === "workers") cleanup = renderWorkers(main);
  else if (target.view === "queues") cleanup = renderQueues(main);
  else cleanup = renderRuns(main, target.params);
  if (focus) main.focus();
  api("GET", "/config").then((config) => syncClock(config.now)).catch(() => {});
}

onAuthRequired((error) => {
  cleanup();
  cleanup = () => {};
  loginMessage.textContent = getKey()
    ? `The API did not accept that key (${error.message}). Enter another one.`
    : "This API needs a key: it was started with LEASEHOLD_API_KEYS. " +
      "Enter one of its keys to continue.";
  main.replaceChildren();
  const notice = document.createElement("p");
  notice.className = "problem";
  notice.setAttribute("role", "alert");
  notice.textContent = "Authentication required: enter an API key to see runs and workers.";
  main.append(notice);
  if (!login.open) login.showModal();
  loginKey.focus();
});

loginForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const key = loginKey.value.trim();
  if (!key) return;
  setKey(key);
  loginKey.value = "";
  login.close();
  route({ focus: true });
});

// without a key nothing else works: Escape must not leave an empty page behind a dismissed prompt
login.addEventListener("cancel", (event) => event.preventDefault());

forget.addEventListener("click", () => {
  clearKey();
  route({ focus: true });
});

window.addEventListener("hashchange", () => route({ focus: true }));
route();
watchMemory(document.getElementById("memory-banner"), login);
