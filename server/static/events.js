// Auditors: the tenant's audit events (who changed accounts, keys, groups, documents and their access lists)
// next to the traces, and "could this principal read this document then?" replayed from those events.
import { api } from "./api.js";
import { byId, clear, el, guarded, inputValue, json } from "./dom.js";
import { PagedTable } from "./pager.js";

const table = new PagedTable("events", { path: "/v1/audit/events", row: eventRow, empty: "No events." });

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

async function askAccess() {
  const at = inputValue("access-at");
  const params = new URLSearchParams({
    principal: inputValue("access-principal"),
    document: inputValue("access-document"),
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
  table.mount(byId("event-filter"));
  byId("access-form").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(/** @type {HTMLFormElement} */ (event.currentTarget).querySelector("button"), askAccess);
  });
  await table.load();
}
