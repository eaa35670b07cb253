// Users and admins: pick a pipeline, ask (in a stored conversation), watch the steps stream in as a timeline of
// what each found or decided, read the answer as the model writes it, then the final answer and its citations.
import { api, apiStream } from "./api.js";
import { byId, clear, el, guarded, seconds, showError } from "./dom.js";
import { stepSubstance } from "./substance.js";
import { treeNodeLabel } from "./tree.js";

/** The conversation the next question continues; null starts a new one. */
let currentConversation = null;

function stepLine(step) {
  const llm = step.llm || {};
  const parts = [`${step.kind}`, step.name, seconds(step.duration_s)];
  if (llm.calls) parts.push(`${llm.calls} LLM call(s), ${llm.total_tokens ?? 0} tokens`);
  const item = el("li", { attrs: { "data-kind": String(step.kind) } });
  if (step.parent !== null && step.parent !== undefined) item.classList.add("nested");
  // A tree strategy's nodes stream in as they finish: indented by depth, marked accepted or rejected.
  const label = treeNodeLabel(step);
  if (label) {
    item.classList.add("tree-node", label.accepted ? "accepted" : "rejected", `depth-${label.depth}`);
    item.setAttribute("data-status", label.status);
    parts.splice(2, 0, label.text);
  }
  item.append(el("span", { className: "step-head", text: parts.join(" · ") }));
  if (step.error) item.append(el("span", { className: "error", text: ` ${step.error}` }));
  const lines = stepSubstance(step);
  if (lines.length) {
    item.append(el("dl", { className: "substance" },
      ...lines.flatMap(([label, text]) => [el("dt", { text: label }), el("dd", { text })])));
  }
  return item;
}

/** "deck.pptx · slide 3", and a warning when the passage was read from a scan by OCR. */
function placeLabel(source, location, ocr) {
  return `${source}${location ? ` · ${location}` : ""}${ocr ? " · OCR text: check the scan" : ""}`;
}

function citationItem(citation) {
  const head = el("div", { className: "source", text: placeLabel(citation.source || citation.document_id, citation.location, citation.ocr) });
  if (typeof citation.score === "number") head.append(el("span", { className: "muted", text: ` score ${citation.score.toFixed(3)}` }));
  const item = el("li", {}, head, el("blockquote", { className: "snippet", text: citation.snippet || "" }));
  // A record's citation is its table row and a web page is not stored; a stored passage opens in its document,
  // between its neighbouring chunks.
  const web = citation.source === "web" && String(citation.document_id).startsWith("web-");
  if (!citation.record && !web && citation.document_id) {
    const panel = el("div", { className: "passage-context", attrs: { "aria-live": "polite" } });
    panel.hidden = true;
    const button = el("button", { className: "link", text: "Show in context", attrs: { type: "button", "aria-expanded": "false" } });
    button.addEventListener("click", () => guarded(button, () => togglePassageContext(citation.document_id, button, panel)));
    head.append(" ", button);
    item.append(panel);
  }
  return item;
}

/** The cited chunk with the previous and next chunk of its source (only those the user may read, server-side). */
async function togglePassageContext(chunkId, button, panel) {
  if (!panel.hidden) {
    panel.hidden = true;
    button.textContent = "Show in context";
    button.setAttribute("aria-expanded", "false");
    return;
  }
  if (!panel.children.length) {
    const context = await api(`/v1/documents/${encodeURIComponent(chunkId)}/context`);
    const part = (passage, className) => el("p", { className, text: passage.content });
    if (context.previous) panel.append(part(context.previous, "neighbour"));
    panel.append(el("p", { className: "cited", text: context.passage.content }));
    if (context.next) panel.append(part(context.next, "neighbour"));
    const where = context.passage.chunk_index === null ? "" : ` · passage ${context.passage.chunk_index + 1}`;
    const source = placeLabel(context.passage.source || context.passage.id, context.passage.location, context.passage.ocr);
    panel.append(el("p", { className: "muted", text: `${source}${where}` }));
  }
  panel.hidden = false;
  button.textContent = "Hide context";
  button.setAttribute("aria-expanded", "true");
}

const RECORD_COLUMNS = [["date", "Date"], ["type", "Type"], ["name", "Name"], ["code", "Code"], ["value", "Value"],
  ["reference_range", "Reference range"], ["flag", "Flag"], ["record_id", "Record id"]];

function cellText(row, key) {
  if (key === "date") return String(row.date || "").slice(0, 10);
  if (key === "value") return row.value === null || row.value === undefined ? "" : `${row.value} ${row.unit || ""}`.trim();
  if (key === "record_id") return String(row.record_id || "").slice(0, 12);
  return row[key] === null || row[key] === undefined ? "" : String(row[key]);
}

/** A line chart of one numeric series (a trend: one code, several dates) in the page's SVG element. */
function drawTrend(rows) {
  const svg = byId("trend-chart");
  clear(svg);
  const points = rows.filter((r) => typeof r.value === "number" && r.date);
  const codes = new Set(points.map((r) => r.code));
  svg.toggleAttribute("hidden", points.length < 2 || codes.size !== 1);
  if (svg.hasAttribute("hidden")) return;
  // The HTML parser put the element in the SVG namespace; its children are created in the same one.
  const make = (tag, attrs) => {
    const node = document.createElementNS(svg.namespaceURI, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    return node;
  };
  const width = 480, height = 160, pad = 28;
  const times = points.map((r) => Date.parse(r.date)), values = points.map((r) => r.value);
  const [t0, t1] = [Math.min(...times), Math.max(...times)], [v0, v1] = [Math.min(...values), Math.max(...values)];
  const x = (t) => (pad + ((t - t0) / ((t1 - t0) || 1)) * (width - 2 * pad)).toFixed(1);
  const y = (v) => (height - pad - ((v - v0) / ((v1 - v0) || 1)) * (height - 2 * pad)).toFixed(1);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("aria-label", `${points[0].name}: ${values.join(", ")} ${points[0].unit || ""}`);
  svg.append(make("polyline", { points: points.map((r, i) => `${x(times[i])},${y(r.value)}`).join(" "),
                                fill: "none", stroke: "currentColor" }));
  points.forEach((r, i) => {
    const dot = make("circle", { cx: x(times[i]), cy: y(r.value), r: 3 });
    const title = make("title", {});
    title.textContent = `${cellText(r, "date")}: ${cellText(r, "value")}${r.flag ? ` (${r.flag})` : ""}`;
    dot.append(title);
    svg.append(dot);
  });
  for (const [value, yPos] of [[v1, pad - 6], [v0, height - pad + 14]]) {
    const label = make("text", { x: 2, y: yPos });
    label.textContent = String(value);
    svg.append(label);
  }
}

/** The answer's record table (rows computed from the records, in `citations[].record`). */
function showRecordTable(result) {
  const holder = byId("record-table");
  clear(holder);
  const rows = (result.citations || []).map((c) => c.record).filter(Boolean);
  // The record_table step is followed by the grounding step that checks the answer against the table.
  const step = (result.steps || []).findLast((s) => s.kind === "record_table");
  const table = step ? (step.outputs || {}).table : null;
  holder.hidden = !table;
  drawTrend(table ? rows : []);
  if (!table) return;
  holder.append(el("h3", { text: `Records (${table.shown} of ${table.total})` }));
  const head = el("tr", {}, ...RECORD_COLUMNS.map(([, label]) => el("th", { text: label, attrs: { scope: "col" } })));
  const body = el("tbody", {}, ...rows.map((row) => el("tr", {}, ...RECORD_COLUMNS.map(([key]) => el("td", { text: cellText(row, key) })))));
  holder.append(el("table", { className: "records" }, el("thead", {}, head), body));
  for (const note of table.notes || []) holder.append(el("p", { className: "muted", text: note }));
}

function showResult(result) {
  // An answer the model did not give (sentences quoted from the passages) is labelled as such, never as the model's.
  const extracted = result.answer_source && result.answer_source !== "model";
  const note = byId("answer-note");
  // A model answer with sentences removed by the grounding check carries a note too: say what was removed.
  const message = extracted ? `Extracted, not generated: ${result.answer_note || "the model gave no usable answer."}` : String(result.answer_note || "");
  note.textContent = message;
  note.hidden = !message;
  const text = byId("answer-text");
  text.textContent = result.answer || "(no answer)";
  text.classList.toggle("extracted", Boolean(extracted));
  showRecordTable(result);
  byId("answer-pipeline").textContent = result.pipeline || "";
  byId("trace-id").textContent = result.trace_id || "(not recorded)";
  const list = byId("citations");
  clear(list);
  for (const citation of result.citations || []) list.append(citationItem(citation));
  if (!list.children.length) list.append(el("li", { className: "muted", text: "No citations." }));
  byId("answer").hidden = false;
  const feedback = byId("feedback-form");
  feedback.dataset.traceId = result.trace_id || "";
  feedback.hidden = !result.trace_id;
  byId("feedback-status").textContent = "";
  /** @type {HTMLInputElement} */ (byId("feedback-comment")).value = "";
}

/** Thumbs up or down on the answer shown, stored against its trace (rating again replaces it). */
async function sendFeedback(rating) {
  const traceId = byId("feedback-form").dataset.traceId;
  if (!traceId) return;
  const comment = /** @type {HTMLInputElement} */ (byId("feedback-comment")).value.trim();
  await api(`/v1/traces/${encodeURIComponent(traceId)}/feedback`, { method: "POST", json: { rating, comment: comment || null } });
  byId("feedback-status").textContent = rating === "up" ? "Thanks: marked helpful." : "Thanks: marked not helpful.";
}

function turnItem(turn) {
  const question = el("p", { className: "turn-question", text: turn.question });
  if (turn.standalone_question && turn.standalone_question !== turn.question) {
    question.append(el("span", { className: "muted", text: ` (asked as: ${turn.standalone_question})` }));
  }
  const answer = el("p", { className: turn.answer_source && turn.answer_source !== "model" ? "turn-answer extracted" : "turn-answer", text: turn.withheld ? "(answer withheld: it cites a document you can no longer read)" : turn.answer || "(no answer)" });
  return el("li", { attrs: { "data-trace-id": String(turn.trace_id || "") } }, question, answer);
}

function showConversation(conversation) {
  currentConversation = conversation ? conversation.id : null;
  byId("conversation-current").textContent = conversation ? `Continuing: ${conversation.title}` : "New conversation: your next question starts one.";
  const turns = byId("conversation-turns");
  clear(turns);
  for (const turn of (conversation && conversation.turns) || []) turns.append(turnItem(turn));
  for (const item of byId("conversations").querySelectorAll("li")) {
    item.classList.toggle("current", /** @type {HTMLElement} */ (item).dataset.id === currentConversation);
  }
}

async function openConversation(id) {
  showConversation(await api(`/v1/conversations/${encodeURIComponent(id)}`));
}

async function deleteConversation(id) {
  await api(`/v1/conversations/${encodeURIComponent(id)}`, { method: "DELETE" });
  if (id === currentConversation) showConversation(null);
  await loadConversations();
}

/** The caller's stored conversations: open one to continue it, or delete it. */
async function loadConversations() {
  const list = byId("conversations");
  const { conversations } = await api("/v1/conversations");
  clear(list);
  for (const conversation of conversations) {
    const open = el("button", { className: "link", text: conversation.title, attrs: { type: "button", "data-action": "open" } });
    const remove = el("button", { text: "Delete", attrs: { type: "button", "data-action": "delete", "aria-label": `Delete conversation ${conversation.title}` } });
    open.addEventListener("click", () => guarded(open, () => openConversation(conversation.id)));
    remove.addEventListener("click", () => guarded(remove, () => deleteConversation(conversation.id)));
    const item = el("li", { attrs: { "data-id": conversation.id } }, open, el("span", { className: "muted", text: ` ${conversation.updated_at.slice(0, 16).replace("T", " ")} ` }), remove);
    item.classList.toggle("current", conversation.id === currentConversation);
    list.append(item);
  }
  if (!conversations.length) list.append(el("li", { className: "muted", text: "No conversations yet." }));
}

async function ask(pipeline, question, inputs = {}) {
  const status = byId("ask-status");
  const steps = byId("steps");
  clear(steps);
  byId("answer").hidden = true;
  // The answer as the model writes it: a preview the final result replaces (a new `call` starts a new draft).
  const live = byId("live-answer");
  live.textContent = "";
  live.dataset.tokens = "0";
  let liveCall = 0;
  status.textContent = "Working…";
  let finished = false;
  const body = { question, pipeline, stream: true, conversation_id: currentConversation || "new", ...inputs };
  await apiStream("/v1/query", body, (event, data) => {
    if (event === "selection") {
      status.textContent = `Pipeline ${data.pipeline || pipeline}${data.reason ? ` (${data.reason})` : ""}; working…`;
    } else if (event === "step") {
      steps.append(stepLine(data));
    } else if (event === "token") {
      if (data.call !== liveCall) {
        liveCall = data.call;
        live.textContent = "";
      }
      live.textContent += String(data.text || "");
      live.dataset.tokens = String(Number(live.dataset.tokens) + 1);
      byId("live").hidden = false;
      status.textContent = "Writing the answer…";
    } else if (event === "answer_replaced") {
      // The draft is not the answer: say so at once, before the extracted answer arrives.
      live.textContent = String(data.answer_note || "The model gave no usable answer; the answer is not generated.");
      byId("live").hidden = false;
    } else if (event === "result") {
      finished = true;
      status.textContent = "Done.";
      byId("live").hidden = true;
      showResult(data);
      if (data.conversation_id) {
        currentConversation = data.conversation_id;
        byId("conversation-turns").append(turnItem({ question, standalone_question: (data.steps || [])[0]?.kind === "rewrite" ? data.steps[0].outputs.question : question, answer: data.answer, answer_source: data.answer_source, trace_id: data.trace_id }));
        /** @type {HTMLTextAreaElement} */ (byId("question")).value = "";
        loadConversations().then(showConversationTitle).catch(showError);
      }
    } else if (event === "error") {
      finished = true;
      status.textContent = "Failed.";
      const error = data.error || {};
      throw Object.assign(new Error(String(error.message || "the query failed")), { code: error.code });
    }
  });
  if (!finished) {
    status.textContent = "Failed.";
    throw new Error("the answer stream ended early; try again");
  }
}

function showConversationTitle() {
  const item = byId("conversations").querySelector(`li[data-id="${CSS.escape(currentConversation || "")}"] button[data-action="open"]`);
  if (item) byId("conversation-current").textContent = `Continuing: ${item.textContent}`;
}

export async function setupAsk() {
  byId("new-conversation").addEventListener("click", () => showConversation(null));
  showConversation(null);
  await loadConversations();
  const select = /** @type {HTMLSelectElement} */ (byId("pipeline"));
  const models = await api("/v1/models");
  clear(select);
  for (const model of models.data || []) select.append(el("option", { text: model.id, attrs: { value: String(model.id) } }));
  select.value = "auto";
  const feedback = byId("feedback-form");
  feedback.addEventListener("submit", (event) => {
    event.preventDefault();
    const button = /** @type {HTMLButtonElement} */ (/** @type {SubmitEvent} */ (event).submitter);
    if (button) guarded(button, () => sendFeedback(button.value));
  });
  const form = byId("ask-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const question = /** @type {HTMLTextAreaElement} */ (byId("question")).value.trim();
    // Patient and as-of are AT-RAG's inputs; other strategies refuse them, so they are sent only to atrag.
    const inputs = {};
    if (select.value === "atrag") {
      const patient = /** @type {HTMLInputElement} */ (byId("patient-id")).value.trim();
      const asOf = /** @type {HTMLInputElement} */ (byId("as-of")).value.trim();
      if (patient) inputs.patient_id = patient;
      if (asOf) inputs.as_of = asOf;
    }
    if (question) guarded(byId("ask-button"), () => ask(select.value, question, inputs));
  });
}
