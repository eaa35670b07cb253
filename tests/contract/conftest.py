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


def make_store(kind: str, tmp_path: Path, name: str) -> Any:
    if kind == "embedded":
        return build_document_store(Settings(data_dir=tmp_path, elasticsearch_url=None))
    index = "docqa-test-" + re.sub(r"[^a-z0-9]+", "-", name.lower())[:60] + "-" + uuid.uuid4().hex[:8]
    return build_document_store(Settings(data_dir=tmp_path, elasticsearch_url=ES_URL), index=index)


def dispose(store: Any) -> None:
    if hasattr(store, "client"):
        store.client.indices.delete(index=store._index, ignore_unavailable=True)
    store.close()


@pytest.fixture(params=STORE_KINDS)
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def contract_store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    store = make_store(store_kind, tmp_path, request.node.name)
    yield store
    dispose(store)
