// Admins: upload files as an ingestion job, follow the job, list and delete the tenant's documents.
import { api, ApiError } from "./api.js";
import { byId, clear, el, guarded } from "./dom.js";
import { PagedTable } from "./pager.js";

const POLL_MS = 1000;
// A job is followed for at most an hour of polls; its status stays available through the API afterwards.
const MAX_POLLS = 3600;
const FINAL_JOB = new Set(["succeeded", "completed_with_errors", "failed"]);

const table = new PagedTable("documents", { path: "/v1/documents", row: documentRow, empty: "No documents." });

function showJob(job) {
  byId("job").hidden = false;
  byId("job-id").textContent = job.job_id;
  byId("job-status").textContent = job.status;
  const progress = /** @type {HTMLProgressElement} */ (byId("job-progress"));
  progress.max = Math.max(job.items_total || 0, 1);
  progress.value = job.items_done || 0;
  byId("job-counts").textContent = `${job.items_done}/${job.items_total} files done: ${job.items_written} written, `
    + `${job.items_skipped} unchanged, ${job.items_failed} failed; ${job.chunks_written} chunks`;
  const failures = byId("job-failures");
  clear(failures);
  for (const failure of job.failures || []) {
    failures.append(el("li", { className: "error", text: `${failure.source_id}: ${failure.reason} (${failure.code})` }));
  }
}

async function follow(jobId) {
  for (let poll = 0; poll < MAX_POLLS; poll += 1) {
    let job;
    try {
      job = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
    } catch (error) {
      // Over the key's rate limit: keep following, just more slowly.
      if (!(error instanceof ApiError && error.status === 429)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 5 * POLL_MS));
      continue;
    }
    showJob(job);
    if (FINAL_JOB.has(job.status)) {
      await table.load();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  byId("job-status").textContent = "still running; refresh the list later";
}

async function upload() {
  const files = /** @type {HTMLInputElement} */ (byId("upload-files")).files;
  if (!files || !files.length) throw new Error("choose at least one file");
  const form = new FormData();
  for (const file of files) form.append("files", file, file.name);
  const access = /** @type {HTMLInputElement} */ (byId("upload-access")).value;
  for (const principal of access.split(",").map((p) => p.trim()).filter(Boolean)) form.append("access", principal);
  const created = await api("/v1/documents", { method: "POST", form });
  byId("job").hidden = false;
  byId("job-id").textContent = created.job_id;
  byId("job-status").textContent = "queued";
  /** @type {HTMLFormElement} */ (byId("upload-form")).reset();
  await follow(created.job_id);
}

async function remove(sourceId, button) {
  if (!window.confirm(`Delete every chunk of ${sourceId}?`)) return;
  await guarded(button, async () => {
    await api(`/v1/documents/${encodeURIComponent(sourceId)}`, { method: "DELETE" });
    await table.load();
  });
}

function documentRow(doc) {
  const button = el("button", { text: "Delete", attrs: { type: "button" } });
  button.addEventListener("click", () => remove(doc.source_id, button));
  const row = el("tr", { attrs: { "data-source": String(doc.source_id) } });
  for (const value of [doc.source_id, doc.title || "", doc.chunks, (doc.access || []).join(", ")]) {
    row.append(el("td", { text: value }));
  }
  row.append(el("td", {}, button));
  return row;
}

export async function setupDocuments() {
  byId("upload-form").addEventListener("submit", (event) => {
    event.preventDefault();
    guarded(byId("upload-button"), upload);
  });
  byId("documents-refresh").addEventListener("click", (event) => guarded(event.currentTarget, () => table.load()));
  table.mount();
  await table.load();
}
