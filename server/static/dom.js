// DOM helpers. Every piece of data reaches the page as a text node: documents, answers and prompts are
// untrusted, so nothing here ever parses a string as HTML.

/**
 * Build an element. `text` becomes its textContent; children are elements or strings (as text nodes).
 * @param {string} tag
 * @param {{text?: unknown, className?: string, attrs?: Record<string, string>}} [props]
 * @param {...(Node|string)} children
 * @returns {HTMLElement}
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  if (props.className) node.className = props.className;
  for (const [name, value] of Object.entries(props.attrs || {})) node.setAttribute(name, value);
  if (props.text !== undefined && props.text !== null) node.textContent = String(props.text);
  for (const child of children) node.append(child);
  return node;
}

/** @param {Element} node */
export function clear(node) {
  node.replaceChildren();
}

/** @param {string} id @returns {HTMLElement} */
export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`missing element #${id}`);
  return node;
}

/** The trimmed value of the input (or select) `#id`. @param {string} id @returns {string} */
export function inputValue(id) {
  return /** @type {HTMLInputElement} */ (byId(id)).value.trim();
}

/** Pretty JSON for <pre> blocks (shown with textContent). */
export function json(value) {
  return JSON.stringify(value, null, 2);
}

/** Show an error (an ApiError or anything thrown) in the page's alert line; `null` hides it. */
export function showError(error) {
  const line = byId("error");
  if (!error) {
    line.hidden = true;
    line.textContent = "";
    return;
  }
  line.textContent = error.code ? `${error.message} (${error.code})` : String(error.message || error);
  line.hidden = false;
}

/** Run an async UI action with its button disabled; errors go to the alert line. */
export async function guarded(button, action) {
  showError(null);
  if (button) button.disabled = true;
  try {
    return await action();
  } catch (error) {
    showError(error);
    return undefined;
  } finally {
    if (button) button.disabled = false;
  }
}

/** "1.234 s" from seconds, tolerating missing values. */
export function seconds(value) {
  return typeof value === "number" && Number.isFinite(value) ? `${value.toFixed(3)} s` : "–";
}
