// The paged tables (documents, traces, events): one way to ask for a page, show it and move between pages.
import { api } from "./api.js";
import { byId, el, guarded, inputValue } from "./dom.js";

export const PAGE = 50;

/**
 * The table `#${name}`, filled from the `name` list of the pages of `path`, and its pager row `#${name}-pager`
 * (Previous, where the page is, Next).
 *
 * Usage:
 *   const table = new PagedTable("events", {
 *     path: "/v1/audit/events", row: eventRow, empty: "No events.",
 *     fields: { actor: "event-actor" }, times: { since: "event-since" },
 *   });
 *   table.mount(byId("event-filter"));
 *   await table.load();
 */
export class PagedTable {
  /**
   * @param {string} name
   * @param {object} how
   * @param {string} how.path the API path of the list
   * @param {(item: any) => HTMLElement} how.row the table row of one item
   * @param {string} how.empty the muted line of an empty page
   * @param {Record<string, string>} [how.fields] query parameter -> id of its filter input (text or select)
   * @param {Record<string, string>} [how.times] query parameter -> id of its datetime-local filter input (the
   *   browser's local time; the API wants an explicit zone, so it is sent as UTC)
   */
  constructor(name, { path, row, empty, fields = {}, times = {} }) {
    Object.assign(this, { name, path, row, empty, fields, times });
    this.offset = 0;
  }

  /**
   * Build the pager row: Previous and Next move by a page and load it (their button disabled meanwhile). A
   * `filter` form's submit goes back to the first page and loads. Mounting again (a new sign-in) replaces the
   * row's buttons.
   * @param {HTMLElement} [filter]
   */
  mount(filter) {
    const button = (text) => /** @type {HTMLButtonElement} */ (el("button", { text, attrs: { type: "button" } }));
    this.prev = button("Previous");
    this.position = el("span", { className: "muted" });
    this.next = button("Next");
    byId(`${this.name}-pager`).replaceChildren(this.prev, this.position, this.next);
    this.prev.addEventListener("click", () => {
      this.offset = Math.max(0, this.offset - PAGE);
      return guarded(this.prev, () => this.load());
    });
    this.next.addEventListener("click", () => {
      this.offset += PAGE;
      return guarded(this.next, () => this.load());
    });
    filter?.addEventListener("submit", (event) => {
      event.preventDefault();
      this.offset = 0;
      guarded(filter.querySelector("button"), () => this.load());
    });
  }

  /** Fetch the current page (with every filled filter input) and show it. */
  async load() {
    const params = new URLSearchParams({ limit: String(PAGE), offset: String(this.offset) });
    for (const [name, id] of Object.entries(this.fields)) {
      if (inputValue(id)) params.set(name, inputValue(id));
    }
    for (const [name, id] of Object.entries(this.times)) {
      if (inputValue(id)) params.set(name, new Date(inputValue(id)).toISOString());
    }
    const page = await api(`${this.path}?${params.toString()}`);
    const table = byId(this.name);
    const columns = String(table.querySelectorAll("thead th").length);
    const none = el("tr", {}, el("td", { className: "muted", text: this.empty, attrs: { colspan: columns } }));
    const rows = page[this.name].map(this.row);
    table.querySelector("tbody").replaceChildren(...(rows.length ? rows : [none]));
    const last = Math.min(this.offset + PAGE, page.total);
    this.position.textContent = page.total ? `${this.offset + 1}–${last} of ${page.total}` : "";
    this.prev.disabled = this.offset === 0;
    this.next.disabled = last >= page.total;
  }
}
