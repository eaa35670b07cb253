"""Admin action: fit a new topic model version for a tenant and re-tag the tenant's stored documents.

Re-fitting is never implicit: queries keep using the version their documents were tagged with until an admin
runs this. Documents are re-written with the new version's tags (same ids, so in place).

Usage:
    info = refit_topic_model(runtime, tenant="acme")
    info.version, info.mode, info.n_topics
    topic_model_status(runtime, "acme").message()   # after an ingestion: missing, stale or current
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from haystack.document_stores.types import DuplicatePolicy

from docqa.components.topic_assigner import VERSION_FIELD, TopicAssigner
from docqa.components.topic_models import TopicModelInfo
from docqa.pipelines.atrag import topic_model_dir
from docqa.runtime import Runtime


def refit_topic_model(runtime: Runtime, tenant: str) -> TopicModelInfo:
    """Fit version N+1 on every stored document of `tenant`, then tag and re-write those documents.

    :raises ValueError: When the tenant has too few documents to fit a topic model.
    """
    store = runtime.document_store
    documents = store.filter_documents(filters={"field": "meta.tenant", "operator": "==", "value": tenant})
    assigner = TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant),
                             document_embedder=runtime.document_embedder())
    info = assigner.fit(documents)
    tagged = assigner.run(documents=documents)["documents"]
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def message(self) -> str:
        refit = f"docqa topics refit --tenant {self.tenant}"
        if self.state == "missing":
            return (f"topic model: none for tenant {self.tenant!r}, so AT-RAG's topic filter is off (its steps say "
                    f"no_topic_model); record questions naming a type, code or state do not need it. Fit one with "
                    f"`{refit}`")
        if self.state == "stale":
            return (f"topic model: v{self.version} for tenant {self.tenant!r} is stale: {self.untagged} documents "
                    f"are not tagged with it; refit with `{refit}`")
        return f"topic model: v{self.version} for tenant {self.tenant!r} covers all the tenant's documents"


def tenant_topic_assigner(runtime: Runtime, tenant: str) -> TopicAssigner | None:
    """The tenant's latest topic model as an assigner for tagging new documents; None when none is fitted."""
    assigner = TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant),
                             document_embedder=runtime.document_embedder())
    return assigner if assigner.model is not None else None


def topic_model_status(runtime: Runtime, tenant: str) -> TopicModelStatus:
    """How the tenant's latest topic model relates to its stored documents (reads only the untagged ones)."""
    model = TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant)).model
    if model is None:
        return TopicModelStatus(tenant, "missing", None, None)
    untagged = runtime.document_store.filter_documents(filters={"operator": "AND", "conditions": [
        {"field": "meta.tenant", "operator": "==", "value": tenant},
        {"field": f"meta.{VERSION_FIELD}", "operator": "!=", "value": model.version},
    ]})
    return TopicModelStatus(tenant, "stale" if untagged else "current", model.version, len(untagged))
