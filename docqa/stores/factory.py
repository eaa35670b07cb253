"""Build the configured document store (its retrievers: `docqa.components.store_retrievers`).

The embedded store under `settings.store_dir()` is the default; `DOCQA_ELASTICSEARCH_URL` switches to
Elasticsearch (elasticsearch-haystack) with an explicit mapping where the access-control fields are keywords.

Usage:
    store = build_document_store(settings)
"""

from __future__ import annotations

from typing import Any

from haystack.utils import Secret

from docqa.access import ACCESS_FIELD, TENANT_FIELD
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore

STORE_FILE = "documents.sqlite3"

# elasticsearch-haystack stores meta keys as top-level fields, so `meta.tenant` is the field `tenant`.
ELASTICSEARCH_MAPPING: dict[str, Any] = {
    "properties": {
        "embedding": {"type": "dense_vector", "index": True, "similarity": "cosine"},
        "content": {"type": "text"},
        TENANT_FIELD: {"type": "keyword"},
        ACCESS_FIELD: {"type": "keyword"},
    },
    "dynamic_templates": [
        {"strings": {"path_match": "*", "match_mapping_type": "string", "mapping": {"type": "keyword"}}}
    ],
}


def build_document_store(settings: Settings, *, index: str | None = None) -> Any:
    """The embedded store, or an `ElasticsearchDocumentStore` when `settings.elasticsearch_url` is set.

    :param index: Elasticsearch index name (defaults to `settings.elasticsearch_index`); ignored when embedded.
    """
    if not settings.elasticsearch_url:
        return EmbeddedDocumentStore(
            path=str(settings.store_dir() / STORE_FILE),
            embedding_space=_space(settings),
            ann_min_chunks=settings.ann_min_chunks,
            snapshot_rows=settings.snapshot_rows or None,
        )
    from haystack_integrations.document_stores.elasticsearch import ElasticsearchDocumentStore

    return ElasticsearchDocumentStore(
        hosts=settings.elasticsearch_url,
        index=index or settings.elasticsearch_index,
        custom_mapping=ELASTICSEARCH_MAPPING,
        # An env-var secret stays serialisable; the value comes from the same DOCQA_ variable as the setting.
        api_key=Secret.from_env_var("DOCQA_ELASTICSEARCH_API_KEY", strict=False),
    )


def _space(settings: Settings) -> str | None:
    """The configured embedder's space; None (nothing recorded or checked) when the model is missing."""
    from docqa.embedding import embedding_space
    from docqa.errors import ModelNotFoundError

    try:
        return embedding_space(settings)
    except ModelNotFoundError:
        return None
