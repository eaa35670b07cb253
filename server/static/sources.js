// The sources status page: each source of the admin's tenant with its last run (status, counts, when, error)
// and next run, refreshed every 10 seconds, and a button that starts a sync now.
import { api, getKey } from "./api.js";
import { byId, clear, el, guarded, showError } from "./dom.js";

const REFRESH_MS = 10_000;
const COUNTS = ["added", "changed", "deleted", "access_changed", "failed"];

function when(value) {
  return value ? new Date(value).toLocaleString() : "–";
}

function row(source) {
  const counts = source.last_counts || {};
  const status = source.running ? "running" : source.last_status;
  const button = el("button", { text: "Sync now", attrs: { type: "button", "data-source": source.name } });
  button.disabled = Boolean(source.running);
  button.addEventListener("click", () => guarded(button, async () => {
    await api(`/v1/admin/sources/${encodeURIComponent(source.name)}/sync`, { method: "POST" });
    await refresh();
  }));
  const cells = [
    el("th", { text: source.name, attrs: { scope: "row" } }),
    el("td", { text: source.type }),
    el("td", { text: source.documents }),
    el("td", { text: status, className: status === "failed" ? "error" : "" }),
    el("td", { text: when(source.last_finished_at) }),
    ...COUNTS.map((name) => el("td", { text: counts[name] ?? "–" })),
    el("td", { text: when(source.next_run_at) }),
    el("td", { text: source.last_error || "", className: "error" }),
    el("td", {}, button),
  ];
  return el("tr", { attrs: { "data-source": source.name } }, ...cells);
}

async function refresh() {
  const sources = await api("/v1/admin/sources");
  const rows = byId("sources-rows");
  clear(rows);
  for (const source of sources) rows.append(row(source));
  byId("sources-table").hidden = sources.length === 0;
  byId("sources-empty").hidden = sources.length !== 0;
}

async function start() {
  if (!getKey()) {
    byId("sources-signin").hidden = false;
    return;
  }
  try {
    const me = await api("/v1/me");
    byId("whoami").textContent = `${me.user_id ?? ""} (${me.tenant ?? ""})`;
    await refresh();
  } catch (error) {
    showError(error);
    return;
  }
  setInterval(() => refresh().catch(showError), REFRESH_MS);
}

start();
