"""Admin action: fit a new topic model version for a tenant and re-tag the tenant's stored documents.

Re-fitting is never implicit: queries keep using the version their documents were tagged with until an admin
runs this. Documents are re-written with the new version's tags (same ids, so in place).

Usage:
    info = refit_topic_model(runtime, tenant="acme")
    info.version, info.mode, info.n_topics
"""

from __future__ import annotations

from haystack.document_stores.types import DuplicatePolicy

from docqa.components.topic_assigner import TopicAssigner
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
