// Auditors: filter and page through traces, open one with every step as a tree, verify the hash chain.
import { api } from "./api.js";
import { byId, clear, el, guarded, json, seconds } from "./dom.js";
import { checkCitationAccess, setupEvents } from "./events.js";
import { PagedTable } from "./pager.js";
import { stepSubstance } from "./substance.js";
import { treeNodeLabel } from "./tree.js";

const table = new PagedTable("traces", { path: "/v1/traces", row: traceRow, empty: "No traces." });

function traceRow(trace) {
  const button = el("button", { text: "Open", attrs: { type: "button" } });
  button.addEventListener("click", () => guarded(button, () => openTrace(trace.id)));
  const row = el("tr", { attrs: { "data-trace": String(trace.id) } });
  for (const text of [trace.asked_at, trace.asked_by, trace.pipeline, trace.status, trace.question]) {
    row.append(el("td", { text }));
  }
  row.append(el("td", {}, button));
  return row;
}

function field(list, name, text) {
  list.append(el("dt", { text: name }), el("dd", { text: text ?? "–" }));
}

function block(title, content) {
  return el("div", { className: "block" }, el("div", { className: "label", text: title }), el("pre", { text: content }));
}

function llmCall(call, index) {
  const tokens = `${call.prompt_tokens ?? 0} prompt + ${call.completion_tokens ?? 0} completion tokens`;
  return el("details", { className: "llm-call" },
    el("summary", { text: `LLM call ${index + 1}${call.model ? ` (${call.model})` : ""} · ${tokens}` }),
    block("Prompt", String(call.prompt ?? "")),
    block("Response", String(call.response ?? "")));
}

/** Whom "who could read this?" asks about: the asking user, else (a CLI or eval trace, whose asker is no user) the
 * first principal the question was asked as (`config.asked_as`, recorded with every trace). */
function accessPrincipal(trace) {
  const askedAs = Array.isArray((trace.config || {}).asked_as) ? trace.config.asked_as : [];
  const user = `user:${trace.asked_by}`;
  if (!askedAs.length || askedAs.includes(user)) return user;
  return askedAs.find((p) => /^(user|group):/.test(p)) || user;
}

function isStart(value) {
  return typeof value === "number" && Number.isFinite(value) && value > 0;
}

function stepNode(step, children, startedAt) {
  const tokens = (step.prompt_tokens || 0) + (step.completion_tokens || 0);
  // A step without a start time (0: recorded outside the run's clock) has no offset rather than an epoch one.
  const offsetS = isStart(step.started_at) ? step.started_at - startedAt : null;
  const head = [`#${step.position}`, step.kind, step.name, `+${seconds(offsetS)}`, seconds(step.duration_s)];
  if (step.llm_calls) head.push(`${step.llm_calls} LLM call(s), ${tokens} tokens (${step.prompt_tokens} + ${step.completion_tokens})`);
  const label = treeNodeLabel(step);
  if (label) head.splice(1, 0, label.text);
  const attrs = { "data-kind": String(step.kind) };
  if (label) attrs["data-status"] = label.status;
  const details = el("details", { className: label ? `step tree-node ${label.accepted ? "accepted" : "rejected"}` : "step", attrs },
    el("summary", { text: head.join(" · ") }));
  if (step.error) details.append(el("p", { className: "error", text: step.error }));
  const lines = stepSubstance(step);
  if (lines.length) {
    // What the step found or decided, readable without opening its JSON.
    details.append(el("dl", { className: "substance" },
      ...lines.flatMap(([name, text]) => [el("dt", { text: name }), el("dd", { text })])));
  }
  const { llm_calls: calls, ...outputs } = step.outputs && typeof step.outputs === "object" ? step.outputs : {};
  details.append(block("Inputs", json(step.inputs)), block("Outputs", json(outputs)));
  if (Array.isArray(step.documents) && step.documents.length) details.append(block("Documents", json(step.documents)));
  if (Array.isArray(calls)) calls.forEach((call, index) => details.append(llmCall(call || {}, index)));
  const item = el("li", {}, details);
  if (children.length) item.append(el("ol", { className: "tree" }, ...children));
  return item;
}

export function stepTree(steps) {
  const sorted = [...steps].sort((a, b) => a.position - b.position);
  const startedAt = Math.min(...sorted.map((s) => (isStart(s.started_at) ? s.started_at : Infinity)));
  const byParent = new Map();
  const positions = new Set(sorted.map((s) => s.position));
  for (const step of sorted) {
    // A parent that is missing (or the step itself) puts the step at the top instead of losing it.
    const parent = positions.has(step.parent) && step.parent !== step.position ? step.parent : null;
    if (!byParent.has(parent)) byParent.set(parent, []);
    byParent.get(parent).push(step);
  }
  const placed = new Set();
  const build = (parent) => (byParent.get(parent) || [])
    .filter((step) => !placed.has(step.position) && placed.add(step.position))
    .map((step) => stepNode(step, build(step.position), startedAt));
  const roots = build(null);
  // Steps only reachable through a parent cycle are still shown.
  const orphans = sorted.filter((step) => !placed.has(step.position)).map((step) => stepNode(step, [], startedAt));
  return [...roots, ...orphans];
}

async function openTrace(traceId) {
  const trace = await api(`/v1/traces/${encodeURIComponent(traceId)}`);
  byId("detail-id").textContent = trace.id;
  const fields = byId("detail-fields");
  clear(fields);
  const totals = trace.totals || {};
  field(fields, "Asked by", `${trace.asked_by} (${trace.tenant})`);
  const askedAs = (trace.config || {}).asked_as;
  if (Array.isArray(askedAs)) field(fields, "Asked as", askedAs.join(", "));
  field(fields, "Asked at", trace.asked_at);
  field(fields, "Question", trace.question);
  field(fields, "Pipeline", trace.pipeline);
  field(fields, "Status", trace.status);
  field(fields, "Answer", trace.answer);
  field(fields, "Stop reason", trace.stop_reason);
  field(fields, "Error", trace.error);
  field(fields, "Totals", `${totals.llm_calls ?? 0} LLM calls, ${totals.prompt_tokens ?? 0} prompt + `
    + `${totals.completion_tokens ?? 0} completion tokens, ${seconds(totals.wall_time_s)}`);
  field(fields, "Models", json(trace.models));
  field(fields, "Config hash", trace.config_hash);
  field(fields, "Chain link", trace.proof ? `seq ${trace.proof.seq}, mac ${trace.proof.mac}` : null);
  // The askers' ratings, kept beside the chained trace.
  const ratings = (trace.feedback || []).map((f) => `thumbs ${f.rating} from ${f.user_id}`
    + `${f.comment ? `: ${f.comment}` : ""} (${f.updated_at})`);
  field(fields, "Feedback", ratings.length ? ratings.join("; ") : "none");
  const citations = byId("detail-citations");
  clear(citations);
  for (const citation of trace.citations || []) {
    // Links the citation to the access events of its document: could the asker read it when they asked?
    const access = el("button", { text: "Who could read this?", attrs: { type: "button", "data-citation-access": "" } });
    access.addEventListener("click", () => checkCitationAccess(accessPrincipal(trace), citation.document_id, trace.asked_at));
    citations.append(el("li", {}, el("div", { className: "source", text: citation.source || citation.document_id }),
      el("blockquote", { className: "snippet", text: citation.snippet || "" }), access));
  }
  const steps = byId("detail-steps");
  clear(steps);
  steps.append(...stepTree(Array.isArray(trace.steps) ? trace.steps : []));
  byId("trace-detail").hidden = false;
  byId("trace-detail").scrollIntoView();
}

async function verify() {
  const result = byId("verify-result");
  result.textContent = "Verifying…";
  result.className = "";
  let report;
  try {
    report = await api("/v1/traces/verify", { method: "POST" });
  } catch (error) {
    result.textContent = "";
    throw error;
  }
  const notes = report.notes && report.notes.length ? ` Notes: ${report.notes.join("; ")}` : "";
  if (report.ok) {
    result.className = "ok";
    result.textContent = `Chain verified: ${report.checked} of this tenant's traces checked.${notes}`;
  } else {
    const broken = report.broken || {};
    result.className = "error";
    result.textContent = `Chain BROKEN${broken.trace_id ? ` at trace ${broken.trace_id}` : ""}: `
      + `${broken.reason || "unknown reason"}; ${report.checked} of this tenant's traces checked.${notes}`;
  }
}

export async function setupTraces() {
  table.mount(byId("trace-filter"));
  byId("verify-chain").addEventListener("click", (event) => guarded(event.currentTarget, verify));
  await table.load();
  await setupEvents();
}
