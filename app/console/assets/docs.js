// /docs: Swagger UI from the package's own copy (no CDN), with the bearer key the console
// uses (sessionStorage, this tab only). Without a key a keyed API answers /openapi.json
// with 401, and Swagger UI would stay blank: the page asks for one first.
import { getKey, setKey } from "./api.js";

const form = document.getElementById("key-form");
const input = document.getElementById("api-key");
const error = document.getElementById("key-error");

async function specAnswers() {
  const key = getKey();
  const headers = key ? { Authorization: `Bearer ${key}` } : {};
  const response = await fetch("/openapi.json", { headers });
  return response.status !== 401;
}

function showDocs() {
  form.hidden = true;
  // SwaggerUIBundle is the global that /docs/assets/swagger-ui-bundle.js defines
  window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    // every call it makes, the spec's fetch and "Try it out", carries the key
    requestInterceptor: (request) => {
      const key = getKey();
      if (key) request.headers.Authorization = `Bearer ${key}`;
      return request;
    },
  });
}

async function start() {
  if (await specAnswers()) {
    showDocs();
    return;
  }
  form.hidden = false;
  input.focus();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  setKey(input.value);
  if (await specAnswers()) {
    showDocs();
  } else {
    error.textContent = "the API refused this key";
  }
});

start();
