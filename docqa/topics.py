"""Administration of the tenants' topic models: refits (by an admin or scheduled after ingestion), whether a
model covers the tenant's documents, and the assigner that tags new documents.

The models themselves (fitting, versions, per-tenant directories, tagging) are `docqa.topic_models`; the
components (`TopicAssigner`, `QueryTopicAssigner`, `TopicFilteredRetriever`) use that store, never this module.
The CLI (`docqa topics`), the server (POST /v1/records) and ingestion call the functions here.

Usage:
    refit_topic_model(runtime, tenant="acme")          # admin: fit version N+1 and re-tag the tenant
    schedule_topic_refit(runtime, "acme")              # after ingestion: fit if none or the corpus grew enough
    topic_model_status(runtime, "acme").message()      # missing, stale or current
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from haystack.document_stores.types import DuplicatePolicy

from docqa.audit.events import TOPICS_REFIT, event_around
from docqa.components.topic_assigner import TopicAssigner
from docqa.topic_models import INFO_FILE, MIN_DOCUMENTS, VERSION_FIELD, TopicModelInfo, TopicModelStore, topic_model_dir

if TYPE_CHECKING:
    from haystack import Document

    from docqa.runtime import Runtime

# The model store itself (fields, versions, fitting) is `docqa.topic_models`; `topic_model_dir` is kept here for
# administration callers that locate a tenant's models.
__all__ = ["REFIT_TASK", "RefitPlan", "TopicModelStatus", "refit_if_due", "refit_topic_model", "schedule_topic_refit",
           "tenant_topic_assigner", "topic_model_dir", "topic_model_status", "topic_refit_due", "with_embeddings"]



def refit_topic_model(runtime: Runtime, tenant: str, actor: str = "system") -> TopicModelInfo:
    """Fit version N+1 on every stored document of `tenant`, then tag and re-write those documents.

    Queries keep using the version their documents were tagged with until this runs: by an admin
    (`docqa topics refit`) or automatically after an ingestion (`schedule_topic_refit`). Documents are re-written
    with the new version's tags (same ids, so in place). The re-tagging is a `topics.refit` audit event (by
    `actor`), committed only when the store write succeeded.

    :raises ValueError: When the tenant has too few documents to fit a topic model.
    """
    store = runtime.document_store
    documents = store.filter_documents(filters={"field": "meta.tenant", "operator": "==", "value": tenant})
    # Stored documents normally carry their embeddings; any that do not are embedded once, here, for fit and tags.
    documents = with_embeddings(documents, runtime.document_embedder)
    assigner = TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant))
    info = assigner.fit(documents)
    tagged = assigner.run(documents=documents)["documents"]
    with event_around(runtime.settings, tenant=tenant, actor=actor, action=TOPICS_REFIT,
                      target=f"topics:{tenant}",
                      after={"version": info.version, "mode": info.mode, "documents": info.n_documents,
                             "topics": info.n_topics}):
        store.write_documents(tagged, policy=DuplicatePolicy.OVERWRITE)
    return info


@dataclass(frozen=True)
class TopicModelStatus:
    """Whether a tenant's topic model covers its documents: `missing` (none fitted), `stale` (documents not
    tagged with the latest version, e.g. ingested after it was fitted) or `current`."""

    tenant: str
    state: str
    version: int | None
    untagged: int | None
    versions: tuple[int, ...] = ()
    fitted_on: int | None = None
    fitted_at: float | None = None
    refit: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "versions": list(self.versions)}

    def message(self) -> str:
        refit = f"docqa topics refit --tenant {self.tenant}"
        if self.state == "missing":
            return (f"topic model: none for tenant {self.tenant!r}, so AT-RAG's topic filter is off (its steps say "
                    f"no_topic_model); record questions naming a type, code or state do not need it. Fit one with "
                    f"`{refit}`")
        if self.state == "stale":
            return (f"topic model: v{self.version} for tenant {self.tenant!r} is stale: {self.untagged} documents "
                    f"are not tagged with it; refit with `{refit}`")
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.fitted_at)) if self.fitted_at else "?"
        earlier = f"; earlier versions {', '.join(f'v{v}' for v in self.versions[:-1])}" if self.versions[:-1] else ""
        return (f"topic model: v{self.version} for tenant {self.tenant!r} covers all the tenant's documents "
                f"(fitted {when} on {self.fitted_on} documents{earlier}; next automatic refit: {self.refit})")


@dataclass(frozen=True)
class RefitPlan:
    """Whether a tenant's topic model should be (re)fitted now, and why."""

    tenant: str
    due: bool
    reason: str
    documents: int
    fitted_on: int | None
    version: int | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _fitted_info(root: Path, version: int) -> TopicModelInfo:
    # The info file alone: deciding whether to refit never loads BERTopic.
    return TopicModelInfo(**json.loads((TopicModelStore(root).path_of(version) / INFO_FILE).read_text()))


def _count(store: Any, filters: dict[str, Any]) -> int:
    counter = getattr(store, "count_documents_by_filter", None)
    return int(counter(filters)) if counter is not None else len(store.filter_documents(filters=filters))


def topic_refit_due(runtime: Runtime, tenant: str) -> RefitPlan:
    """Due when the tenant has no topic model and enough documents for one, or when its document count has grown
    by `settings.topic_refit_growth` (a fraction) since the latest version was fitted."""
    store = TopicModelStore(topic_model_dir(runtime.settings.data_dir, tenant))
    documents = _count(runtime.document_store, {"field": "meta.tenant", "operator": "==", "value": tenant})
    version = store.latest_version()
    if version is None:
        due = documents >= MIN_DOCUMENTS
        reason = (f"no topic model yet, {documents} documents" if due
                  else f"no topic model yet, but only {documents} documents (at least {MIN_DOCUMENTS} needed)")
        return RefitPlan(tenant, due, reason, documents, None, None)
    fitted_on = _fitted_info(store.root, version).n_documents
    threshold = math.ceil(fitted_on * (1 + runtime.settings.topic_refit_growth))
    due = documents >= threshold
    reason = (f"corpus grew from {fitted_on} to {documents} documents since v{version}" if due
              else f"v{version} was fitted on {fitted_on} documents; {documents} now (refit at {threshold})")
    return RefitPlan(tenant, due, reason, documents, fitted_on, version)


REFIT_TASK = "docqa.topics.refit"


def refit_if_due(runtime: Runtime, tenant: str) -> str | None:
    """Refit the tenant's topic model now if `topic_refit_due` says so, unless another process is fitting it.

    :returns: What was done, for the caller to report; None when nothing was due or autofit is off.
    """
    if not runtime.settings.topic_autofit:
        return None
    plan = topic_refit_due(runtime, tenant)
    if not plan.due:
        return None
    root = topic_model_dir(runtime.settings.data_dir, tenant)
    root.mkdir(parents=True, exist_ok=True)
    try:
        # Concurrent uploads of one tenant fit once: a second caller finds the lock held and leaves it.
        with FileLock(str(root / ".refit.lock"), timeout=0):
            if not topic_refit_due(runtime, tenant).due:
                return None
            try:
                info = refit_topic_model(runtime, tenant)
            except ValueError as exc:  # e.g. too few documents with content and an embedding
                return f"topic model: not fitted automatically ({exc})"
    except Timeout:
        return f"topic model: another process is already fitting tenant {tenant!r}'s model"
    return (f"topic model: fitted v{info.version} automatically ({plan.reason}; {info.n_topics} topics, "
            f"{info.mode})")


def schedule_topic_refit(runtime: Runtime, tenant: str) -> str | None:
    """After an ingestion: refit on the Celery workers when a broker is configured (they run it in the
    background), else here and now. Returns what was done or queued (None when nothing was due)."""
    if not runtime.settings.topic_autofit:
        return None
    if runtime.settings.broker_url:
        plan = topic_refit_due(runtime, tenant)
        if not plan.due:
            return None
        from docqa.ingestion.celery_app import celery_app_for

        celery_app_for(runtime.settings).send_task(REFIT_TASK, args=[tenant])
        return f"topic model: refit queued for the workers ({plan.reason})"
    return refit_if_due(runtime, tenant)


def tenant_topic_assigner(runtime: Runtime, tenant: str) -> TopicAssigner | None:
    """The tenant's latest topic model as an assigner for tagging new documents (embedded first: untagged
    otherwise); None when none is fitted."""
    assigner = TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant))
    return assigner if assigner.model is not None else None


def with_embeddings(documents: list[Document], embedder: Callable[[], Any]) -> list[Document]:
    """`documents`, those without an embedding embedded by `embedder()` (built only when one is missing)."""
    missing = [d for d in documents if d.embedding is None]
    if not missing:
        return list(documents)
    embedded = {d.id: d for d in embedder().run(documents=missing)["documents"]}
    return [embedded.get(d.id, d) if d.embedding is None else d for d in documents]


def topic_model_status(runtime: Runtime, tenant: str) -> TopicModelStatus:
    """How the tenant's latest topic model relates to its stored documents (reads only the untagged ones)."""
    store = TopicModelStore(topic_model_dir(runtime.settings.data_dir, tenant))
    versions = store.versions()
    if not versions:
        return TopicModelStatus(tenant, "missing", None, None)
    info = _fitted_info(store.root, versions[-1])
    untagged = _count(runtime.document_store, {"operator": "AND", "conditions": [
        {"field": "meta.tenant", "operator": "==", "value": tenant},
        {"field": f"meta.{VERSION_FIELD}", "operator": "!=", "value": info.version},
    ]})
    plan = topic_refit_due(runtime, tenant)
    refit = ("off (DOCQA_TOPIC_AUTOFIT=false)" if not runtime.settings.topic_autofit
             else f"due now ({plan.reason})" if plan.due else plan.reason.split("; ", 1)[-1])
    return TopicModelStatus(tenant, "stale" if untagged else "current", info.version, untagged, tuple(versions),
                            info.n_documents, info.created_at, refit)
