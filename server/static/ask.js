// Users and admins: pick a pipeline, ask, watch the steps stream in, read the answer and its citations.
import { api, apiStream } from "./api.js";
import { byId, clear, el, guarded, seconds } from "./dom.js";

function stepLine(step) {
  const llm = step.llm || {};
  const parts = [`${step.kind}`, step.name, seconds(step.duration_s)];
  if (llm.calls) parts.push(`${llm.calls} LLM call(s), ${llm.total_tokens ?? 0} tokens`);
  const item = el("li", { attrs: { "data-kind": String(step.kind) } });
  if (step.parent !== null && step.parent !== undefined) item.classList.add("nested");
  item.append(el("span", { text: parts.join(" · ") }));
  if (step.error) item.append(el("span", { className: "error", text: ` ${step.error}` }));
  return item;
}

function citationItem(citation) {
  const head = el("div", { className: "source", text: citation.source || citation.document_id });
  if (typeof citation.score === "number") head.append(el("span", { className: "muted", text: ` score ${citation.score.toFixed(3)}` }));
  return el("li", {}, head, el("blockquote", { className: "snippet", text: citation.snippet || "" }));
}

function showResult(result) {
  byId("answer-text").textContent = result.answer || "(no answer)";
  byId("answer-pipeline").textContent = result.pipeline || "";
  byId("trace-id").textContent = result.trace_id || "(not recorded)";
  const list = byId("citations");
  clear(list);
  for (const citation of result.citations || []) list.append(citationItem(citation));
  if (!list.children.length) list.append(el("li", { className: "muted", text: "No citations." }));
  byId("answer").hidden = false;
}

async function ask(pipeline, question) {
  const status = byId("ask-status");
  const steps = byId("steps");
  clear(steps);
  byId("answer").hidden = true;
  status.textContent = "Working…";
  let finished = false;
  await apiStream("/v1/query", { question, pipeline, stream: true }, (event, data) => {
    if (event === "selection") {
      status.textContent = `Pipeline ${data.pipeline || pipeline}${data.reason ? ` (${data.reason})` : ""}; working…`;
    } else if (event === "step") {
      steps.append(stepLine(data));
    } else if (event === "result") {
      finished = true;
      status.textContent = "Done.";
      showResult(data);
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

export async function setupAsk() {
  const select = /** @type {HTMLSelectElement} */ (byId("pipeline"));
  const models = await api("/v1/models");
  clear(select);
  for (const model of models.data || []) select.append(el("option", { text: model.id, attrs: { value: String(model.id) } }));
  select.value = "auto";
  const form = byId("ask-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const question = /** @type {HTMLTextAreaElement} */ (byId("question")).value.trim();
    if (question) guarded(byId("ask-button"), () => ask(select.value, question));
  });
}
