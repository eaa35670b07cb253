"""Store fixtures shared by the contract tests: the embedded store always, Elasticsearch when configured.

Elasticsearch runs only when DOCQA_ELASTICSEARCH_URL points at a live server (docker/docker-compose.elasticsearch.yml
starts one); otherwise its cases are skipped with that reason. It is never faked.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from docqa.settings import Settings
from docqa.stores.factory import build_document_store

ES_URL = os.environ.get("DOCQA_ELASTICSEARCH_URL")
STORE_KINDS = [
    pytest.param("embedded", id="embedded"),
    pytest.param(
        "elasticsearch",
        id="elasticsearch",
        marks=[
            pytest.mark.elasticsearch,
            pytest.mark.integration,
            pytest.mark.skipif(not ES_URL, reason="DOCQA_ELASTICSEARCH_URL is not set"),
        ],
    ),
]


# The embedded store's two dense search paths: exact everywhere, or HNSW from the first embedding on.
DENSE_PATHS = {"exact": 10**9, "ann": 0}
# The embedded store's index without snapshots, or re-snapshotted (synchronously) after every change, so every
# query runs on a memory-mapped snapshot generation.
INDEX_MODES = ["memory", "snapshots"]


def make_store(kind: str, tmp_path: Path, name: str, dense_path: str = "exact", index_mode: str = "memory") -> Any:
    if kind == "embedded":
        store = build_document_store(
            Settings(data_dir=tmp_path, elasticsearch_url=None, ann_min_chunks=DENSE_PATHS[dense_path])
        )
        if index_mode == "snapshots":
            store.snapshot_rows, store.snapshot_in_background = 1, False
        return store
    index = "docqa-test-" + re.sub(r"[^a-z0-9]+", "-", name.lower())[:60] + "-" + uuid.uuid4().hex[:8]
    return build_document_store(Settings(data_dir=tmp_path, elasticsearch_url=ES_URL), index=index)


def dispose(store: Any) -> None:
    if hasattr(store, "client"):
        store.client.indices.delete(index=store._index, ignore_unavailable=True)
    store.close()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=list(DENSE_PATHS))
def dense_path(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=INDEX_MODES)
def index_mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def contract_store(
    store_kind: str, dense_path: str, index_mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    if store_kind != "embedded" and (dense_path != "exact" or index_mode != "memory"):
        pytest.skip("the dense search threshold and index snapshots belong to the embedded store")
    store = make_store(store_kind, tmp_path, request.node.name, dense_path, index_mode)
    yield store
    dispose(store)
