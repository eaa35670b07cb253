// Tree strategies (ConTReGen): a node step's outputs carry `node` with its status; label it by its verdict.

const ACCEPTED_NODES = new Set(["root", "accepted"]);

/**
 * The verdict label of a tree node step, or null for any other step.
 * @returns {{accepted: boolean, depth: number, status: string, text: string} | null}
 */
export function treeNodeLabel(step) {
  const node = step && step.outputs && typeof step.outputs === "object" ? step.outputs.node : null;
  if (!node || typeof node !== "object" || typeof node.status !== "string") return null;
  const accepted = ACCEPTED_NODES.has(node.status);
  const question = String((accepted && node.query) || node.sub_question || "");
  const kept = Array.isArray(node.passage_ids) ? node.passage_ids.length : 0;
  const dropped = Array.isArray(node.dropped) ? node.dropped.length : 0;
  const verdict = accepted ? `✓ ${node.status}` : `✗ ${node.status.replaceAll("_", " ")}`;
  const depth = Number.isInteger(node.depth) ? Math.max(0, Math.min(node.depth, 4)) : 0;
  return { accepted, depth, status: node.status, text: `${verdict}: ${question} (${kept} kept, ${dropped} dropped)` };
}
