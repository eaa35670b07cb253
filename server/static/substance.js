// What a step found or decided, in a few readable lines: the query and the passages found, ReSP's memories, the
// judgement, the planned sub-question (and why a plan was rejected), AT-RAG's topic and grades, rewrites.
// Shared by the ask page (live, as steps stream in) and the trace page. Everything is shown as text.

const MAX_TEXT = 240;
const MAX_PASSAGES = 5;

const obj = (value) => (value && typeof value === "object" && !Array.isArray(value) ? value : {});
const str = (value) => (value === null || value === undefined ? "" : String(value));

function short(text, limit = MAX_TEXT) {
  const flat = str(text).replace(/\s+/g, " ").trim();
  return flat.length > limit ? `${flat.slice(0, limit - 1)}…` : flat;
}

function yesNo(value, yes, no, unknown = "could not tell") {
  if (value === true) return yes;
  if (value === false) return no;
  return unknown;
}

/** "Found 2 passages" plus one line per passage (source: snippet). */
function passages(documents) {
  const docs = Array.isArray(documents) ? documents : [];
  const lines = [["Found", docs.length === 1 ? "1 passage" : `${docs.length} passages`]];
  for (const doc of docs.slice(0, MAX_PASSAGES)) {
    const d = obj(doc);
    lines.push(["Passage", `${str(d.source || d.id)}: ${short(d.snippet || d.content, 140)}`]);
  }
  if (docs.length > MAX_PASSAGES) lines.push(["Passage", `… and ${docs.length - MAX_PASSAGES} more`]);
  return lines;
}

function topicLine(topic) {
  const t = obj(topic);
  if (!Object.keys(t).length) return [];
  const label = t.label || t.name || t.topic || t.id;
  const parts = [label !== undefined ? str(label) : short(JSON.stringify(t), 120)];
  if (typeof t.probability === "number") parts.push(`p=${t.probability.toFixed(2)}`);
  if (t.fallback || t.reason) parts.push(str(t.fallback || t.reason));
  return [["Topic", parts.join(" · ")]];
}

function memoryLines(outputs) {
  const lines = [];
  const global = obj(outputs.global_evidence);
  if (global.summary) lines.push(["Memory (global evidence)", short(global.summary)]);
  const local = obj(outputs.pathway_entry);
  if (local.summary || local.answer) lines.push(["Memory (local pathway)", short(local.summary || local.answer)]);
  return lines;
}

function decisionLine(decision) {
  const d = obj(decision);
  if (!Object.keys(d).length) return [];
  const parts = [str(d.event || d.why || "decided")];
  if (d.next) parts.push(`next: ${d.next}`);
  if (d.reason) parts.push(str(d.reason));
  return [["Decision", parts.join(" · ")]];
}

/**
 * The substance of one step as [label, text] lines (empty when there is nothing worth saying).
 * @param {any} step a step as streamed (`step` events) or stored (trace steps)
 * @returns {Array<[string, string]>}
 */
/** Why a generation step kept no answer, in the words of the answer's note (docqa.extractive_fallback). */
function noAnswerWhy(outputs) {
  if (outputs.finish_reason === "length") return "none: the reply was cut at the token limit";
  const calls = Array.isArray(outputs.llm_calls) ? outputs.llm_calls : [];
  const replied = calls.some((call) => call && typeof call.response === "string" && call.response.trim());
  return replied ? "none: the model only repeated the question or prompt" : "none: the model gave no answer";
}

export function stepSubstance(step) {
  const inputs = obj(step && step.inputs);
  const outputs = obj(step && step.outputs);
  const kind = str(step && step.kind);
  const lines = [];
  if (kind === "rewrite") {
    const method = outputs.method ? ` (${str(outputs.method).replaceAll("_", " ")})` : "";
    if (inputs.question !== undefined) lines.push(["Asked", short(inputs.question)]);
    if (inputs.feedback) lines.push(["Why", short(inputs.feedback)]);
    lines.push(["Rewritten as", outputs.query === null ? "no new query" : `${short(outputs.question ?? outputs.query)}${method}`]);
    if (outputs.rejected_llm_rewrite) lines.push(["Model's rewrite", `not used: ${short(outputs.rejected_llm_rewrite)}`]);
    return lines;
  }
  const query = inputs.query ?? (Array.isArray(obj(inputs.state).queries) ? obj(inputs.state).queries.at(-1) : undefined);
  if (kind === "retrieval" && query) lines.push(["Query", short(query)]);
  if (Array.isArray(outputs.documents) && ["retrieval", "rerank", "component"].includes(kind)) lines.push(...passages(outputs.documents));
  lines.push(...topicLine(outputs.topic ?? outputs.query_topic));
  lines.push(...memoryLines(outputs));
  if (kind === "judgement" || "sufficient" in outputs) {
    lines.push(["Judgement", yesNo(outputs.sufficient, "enough information to answer", "more information needed")]);
  }
  if (kind === "plan" || "sub_question" in outputs) {
    if (outputs.sub_question) lines.push(["Planned sub-question", short(outputs.sub_question)]);
    if (outputs.accepted === false) {
      const repeat = obj(outputs.repeat_check);
      const why = outputs.rejected_reason || outputs.reason
        || (repeat.repeated ? `repeats “${short(repeat.matched, 100)}”${typeof repeat.similarity === "number" ? ` (similarity ${repeat.similarity.toFixed(2)})` : ""}` : "");
      lines.push(["Rejected", why ? str(why) : "the plan was not usable"]);
    }
  }
  if (kind === "grading" || "passed" in outputs) {
    const grades = [`grounded: ${yesNo(outputs.grounded, "yes", "no")}`, `useful: ${yesNo(outputs.useful, "yes", "no")}`];
    lines.push(["Grade", `${yesNo(outputs.passed, "passed", "failed", "not graded")} (${grades.join(", ")})`]);
    if (outputs.feedback) lines.push(["Why", short(outputs.feedback)]);
  }
  if (kind === "time_scope") {
    const scope = obj(outputs.scope);
    lines.push(["Time scope", scope.kind && scope.kind !== "none" ? `${scope.kind}${scope.phrase ? ` (“${scope.phrase}”)` : ""}` : "none"]);
  }
  const decision = obj(outputs.decision);
  if (decision.action !== undefined || decision.thought !== undefined) {
    if (decision.thought) lines.push(["Thought", short(decision.thought)]);
    lines.push(["Action", decision.malformed ? "malformed reply (retried)" : `${str(decision.action)} ${short(decision.action_input, 160)}`.trim()]);
  } else if (kind === "control") {
    lines.push(...decisionLine(outputs.decision || outputs.route));
  }
  if (kind === "fallback") {
    lines.push(["Fallback", `${str(inputs.reason) || "no usable answer"}: ${Array.isArray(outputs.sentences) ? outputs.sentences.length : 0} sentence(s) quoted`]);
  }
  if (["generation", "reasoning", "synthesis"].includes(kind) && typeof outputs.answer === "string") {
    lines.push(["Answer", outputs.answer ? short(outputs.answer) : noAnswerWhy(outputs)]);
  }
  if (outputs.stop_reason) lines.push(["Stopped", str(outputs.stop_reason).replaceAll("_", " ")]);
  return lines;
}
