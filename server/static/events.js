// Auditors: the tenant's audit events (who changed accounts, keys, groups, documents and their access lists)
// next to the traces, and "could this principal read this document then?" replayed from those events.
import { api } from "./api.js";
import { byId, clear, el, guarded, json } from "./dom.js";

const PAGE = 50;
let offset = 0;

function value(id) {
  return /** @type {HTMLInputElement} */ (byId(id)).value.trim();
}

function query() {
  const params = new URLSearchParams({ limit: String(PAGE), offset: String(offset) });
  for (const [name, id] of [["action", "event-action"], ["actor", "event-actor"], ["target", "event-target"]]) {
    if (value(id)) params.set(name, value(id));
  }
  for (const [name, id] of [["since", "event-since"], ["until", "event-until"]]) {
    if (value(id)) params.set(name, new Date(value(id)).toISOString());
  }
  return params.toString();
}

function eventRow(event) {
  const row = el("tr", { attrs: { "data-event": String(event.id) } });
  for (const text of [event.at, event.actor, event.action, event.target, event.result, event.request_id ?? "–"]) {
    row.append(el("td", { text }));
  }
  const changes = el("details", {}, el("summary", { text: "before / after" }),
    el("pre", { text: `before: ${json(event.before)}\nafter: ${json(event.after)}` }));
  row.append(el("td", {}, changes));
  return row;
}

async function loadEvents() {
  const page = await api(`/v1/audit/events?${query()}`);
  const body = byId("events").querySelector("tbody");
  clear(body);
  for (const event of page.events) body.append(eventRow(event));
  if (!page.events.length) body.append(el("tr", {}, el("td", { className: "muted", text: "No events.", attrs: { colspan: "7" } })));
  const last = Math.min(offset + PAGE, page.total);
  byId("events-page").textContent = page.total ? `${offset + 1}–${last} of ${page.total}` : "";
  /** @type {HTMLButtonElement} */ (byId("events-prev")).disabled = offset === 0;
  /** @type {HTMLButtonElement} */ (byId("events-next")).disabled = last >= page.total;
}

async function askAccess() {
  const at = value("access-at");
  const params = new URLSearchParams({
    principal: value("access-principal"),
    document: value("access-document"),
    // A datetime-local value is the browser's local time; a value with a zone (from a trace) is kept.
    at: /[zZ]|[+-]\d\d:\d\d$/.test(at) ? at : new Date(at).toISOString(),
  });
  const answer = await api(`/v1/audit/access?${params.toString()}`);
  const result = byId("access-result");
  clear(result);
  if (answer.candidates && answer.candidates.length) {
    // A displayed name several documents share: offer each, a click asks again about that one.
    result.className = "";
    result.append(el("p", { text: `“${answer.document}” names ${answer.candidates.length} documents; choose one:` }));
    const choices = el("ul", { className: "candidates" });
    for (const candidate of answer.candidates) {
      const pick = el("button", { text: candidate, attrs: { type: "button" } });
      pick.addEventListener("click", () => {
        /** @type {HTMLInputElement} */ (byId("access-document")).value = candidate;
        return guarded(pick, askAccess);
      });
      choices.append(el("li", {}, pick));
    }
    result.append(choices);
    return;
  }
  result.className = answer.allowed ? "ok" : "error";
  const named = answer.resolved ? `${answer.document} (${answer.resolved})` : answer.document;
  result.append(el("p", { text: `${answer.allowed ? "YES" : "NO"}: ${answer.principal} ${answer.allowed ? "could" : "could not"} `
    + `read ${named} at ${answer.at}` }));
  const reasons = el("ul");
  for (const reason of answer.reasons) reasons.append(el("li", { text: reason }));
  const events = el("ol");
  for (const event of answer.events) {
    events.append(el("li", { text: `${event.at} ${event.action} ${event.target} by ${event.actor}` }));
  }
  result.append(reasons, events);
}

/** From a trace's citation: could the asker read the cited chunk when they asked? */
export function checkCitationAccess(principal, documentId, askedAt) {
  /** @type {HTMLInputElement} */ (byId("access-principal")).value = principal;
  /** @type {HTMLInputElement} */ (byId("access-document")).value = documentId;
  /** @type {HTMLInputElement} */ (byId("access-at")).value = askedAt;
  byId("access-form").scrollIntoView();
  return guarded(/** @type {HTMLFormElement} */ (byId("access-form")).querySelector("button"), askAccess);
}

export async function setupEvents() {
  byId("event-filter").addEventListener("submit", (event) => {
    event.preventDefault();
    offset = 0;
    guarded(/** @type {HTMLFormElement} */ (event.currentTarget).querySelector("button"), loadEvents);
  });
  byId("events-prev").addEventListener("click", (event) => {
    offset = Math.max(0, offset - PAGE);
    guarded(event.currentTarget, loadEvents);
  });
  byId("events-next").addEventListener("click", (event) => {
    offset += PAGE;
    guarded(event.currentTarget, loadEvents);
  });
  byId("access-form").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(/** @type {HTMLFormElement} */ (event.currentTarget).querySelector("button"), askAccess);
  });
  await loadEvents();
}
