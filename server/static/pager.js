// The paged tables (documents, traces, events): one way to ask for a page, show it and move between pages.
import { byId, el, guarded, inputValue } from "./dom.js";

export const PAGE = 50;

/**
 * The table `#${name}` and its pager row `#${name}-pager` (Previous, where the page is, Next).
 *
 * Usage:
 *   const table = new PagedTable("events");
 *   async function load() {
 *     const page = await api(`/v1/audit/events?${table.query({ actor: "event-actor" }, { since: "event-since" })}`);
 *     table.show(page.total, page.events.map(eventRow), "No events.");
 *   }
 *   table.mount(load, byId("event-filter"));
 */
export class PagedTable {
  /** @param {string} name */
  constructor(name) {
    this.name = name;
    this.offset = 0;
  }

  /**
   * Build the pager row: Previous and Next move by a page and run `load` (their button disabled meanwhile).
   * A `filter` form's submit goes back to the first page and loads. Mounting again (a new sign-in) replaces the
   * row's buttons.
   * @param {() => Promise<void>} load
   * @param {HTMLElement} [filter]
   */
  mount(load, filter) {
    const button = (text) => /** @type {HTMLButtonElement} */ (el("button", { text, attrs: { type: "button" } }));
    this.prev = button("Previous");
    this.position = el("span", { className: "muted" });
    this.next = button("Next");
    byId(`${this.name}-pager`).replaceChildren(this.prev, this.position, this.next);
    this.prev.addEventListener("click", () => {
      this.offset = Math.max(0, this.offset - PAGE);
      return guarded(this.prev, load);
    });
    this.next.addEventListener("click", () => {
      this.offset += PAGE;
      return guarded(this.next, load);
    });
    filter?.addEventListener("submit", (event) => {
      event.preventDefault();
      this.offset = 0;
      guarded(filter.querySelector("button"), load);
    });
  }

  /**
   * The current page's query string: `limit`, `offset` and every filled filter input.
   * @param {Record<string, string>} [fields] query parameter -> id of its text input or select
   * @param {Record<string, string>} [times] query parameter -> id of its datetime-local input (the browser's local
   *   time; the API wants an explicit zone, so it is sent as UTC)
   */
  query(fields = {}, times = {}) {
    const params = new URLSearchParams({ limit: String(PAGE), offset: String(this.offset) });
    for (const [name, id] of Object.entries(fields)) {
      if (inputValue(id)) params.set(name, inputValue(id));
    }
    for (const [name, id] of Object.entries(times)) {
      if (inputValue(id)) params.set(name, new Date(inputValue(id)).toISOString());
    }
    return params.toString();
  }

  /**
   * Show a loaded page: its `rows` (or a muted `empty` line), where it is in the list of `total` rows, and
   * whether pages come before and after it.
   * @param {number} total @param {HTMLElement[]} rows @param {string} empty
   */
  show(total, rows, empty) {
    const table = byId(this.name);
    const columns = String(table.querySelectorAll("thead th").length);
    const none = el("tr", {}, el("td", { className: "muted", text: empty, attrs: { colspan: columns } }));
    table.querySelector("tbody").replaceChildren(...(rows.length ? rows : [none]));
    const last = Math.min(this.offset + PAGE, total);
    this.position.textContent = total ? `${this.offset + 1}–${last} of ${total}` : "";
    this.prev.disabled = this.offset === 0;
    this.next.disabled = last >= total;
  }
}
