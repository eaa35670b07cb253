// The paged tables (documents, traces, events): one way to ask for a page, show it and move between pages.
import { api } from "./api.js";
import { byId, el, guarded } from "./dom.js";

export const PAGE = 50;

/**
 * The table `#${name}`, filled from the `name` list of the pages of `path`, and its pager row `#${name}-pager`
 * (Previous, where the page is, Next). Each named input of the filter form is the query parameter of its name.
 *
 * Usage:
 *   const table = new PagedTable("events", { path: "/v1/audit/events", row: eventRow, empty: "No events." });
 *   table.mount(byId("event-filter"));
 *   await table.load();
 */
export class PagedTable {
  /**
   * @param {string} name
   * @param {{path: string, row: (item: any) => HTMLElement, empty: string}} how the list's API path, the table
   *   row of one item, and the muted line of an empty page
   */
  constructor(name, { path, row, empty }) {
    Object.assign(this, { name, path, row, empty });
    this.offset = 0;
    this.filter = null;
  }

  /**
   * Build the pager row: Previous and Next move by a page and load it (their button disabled meanwhile). A
   * `filter` form's submit goes back to the first page and loads. Mounting again (a new sign-in) replaces the
   * row's buttons.
   * @param {HTMLElement} [filter]
   */
  mount(filter) {
    this.filter = filter ?? null;
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
    for (const input of this.filter ? this.filter.querySelectorAll("input[name], select[name]") : []) {
      const value = /** @type {HTMLInputElement} */ (input).value.trim();
      // datetime-local is the browser's local time; the API wants an explicit zone.
      if (value) params.set(input.name, input.type === "datetime-local" ? new Date(value).toISOString() : value);
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
