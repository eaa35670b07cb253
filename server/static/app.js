// Sign-in and navigation: the key is checked with GET /v1/me and the caller's role decides the views.
import { api, forgetKey, getKey, setKey } from "./api.js";
import { setupAsk } from "./ask.js";
import { byId, guarded, showError } from "./dom.js";
import { setupDocuments } from "./documents.js";
import { setupTraces } from "./traces.js";

// Mirrors the server's role checks (docqa/server/auth.py); the server enforces them on every call anyway.
const ROLE_VIEWS = {
  user: ["ask"],
  admin: ["ask", "documents"],
  auditor: ["traces"],
};
const VIEW_SETUP = { ask: setupAsk, documents: setupDocuments, traces: setupTraces };
const ALL_VIEWS = ["signin", ...Object.keys(VIEW_SETUP)];

const opened = new Set();

function show(view) {
  for (const name of ALL_VIEWS) {
    const section = document.getElementById(`${name}-view`);
    if (section) section.hidden = name !== view;
  }
  for (const tab of byId("tabs").querySelectorAll("button")) {
    tab.setAttribute("aria-current", tab.dataset.view === view ? "page" : "false");
  }
}

async function open(view) {
  show(view);
  if (!opened.has(view)) {
    opened.add(view);
    await guarded(null, VIEW_SETUP[view]);
  }
}

function signedOut() {
  forgetKey();
  opened.clear();
  byId("tabs").hidden = true;
  byId("sign-out").hidden = true;
  byId("whoami").textContent = "";
  show("signin");
}

async function signIn() {
  let me;
  try {
    me = await api("/v1/me");
  } catch (error) {
    signedOut();
    throw error;
  }
  const views = ROLE_VIEWS[me.role] || [];
  byId("whoami").textContent = `${me.user_id} (${me.role}) · ${me.tenant}`;
  for (const tab of byId("tabs").querySelectorAll("button")) {
    const allowed = views.includes(tab.dataset.view);
    tab.hidden = !allowed;
    // Views the role may not use are removed, not just hidden.
    if (!allowed) byId(`${tab.dataset.view}-view`).remove();
  }
  byId("tabs").hidden = false;
  byId("sign-out").hidden = false;
  if (!views.length) throw new Error(`the role '${me.role}' has no views here`);
  await open(views[0]);
}

function start() {
  const form = byId("signin-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = /** @type {HTMLInputElement} */ (byId("api-key"));
    const key = input.value.trim();
    input.value = "";
    if (!key) return;
    setKey(key);
    guarded(form.querySelector("button"), signIn);
  });
  byId("tabs").addEventListener("click", (event) => {
    const view = event.target instanceof HTMLElement ? event.target.dataset.view : undefined;
    if (view) open(view);
  });
  byId("sign-out").addEventListener("click", () => {
    showError(null);
    signedOut();
    // A fresh page brings back the views a previous role removed.
    location.reload();
  });
  if (getKey()) guarded(null, signIn);
  else show("signin");
}

start();
