"""Haystack's own DocumentStore conformance suite, run against every store docqa can use."""

from __future__ import annotations

import dataclasses

import pytest
from haystack import Document
from haystack.document_stores.errors import DuplicateDocumentError
from haystack.testing.document_store import (
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    DocumentStoreBaseExtendedTests,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldUniqueValuesTest,
)
from haystack.testing.document_store_async import (
    CountDocumentsAsyncTest,
    DeleteAllAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
)


class TestDocumentStoreConformance(
    DocumentStoreBaseExtendedTests,
    CountDocumentsByFilterTest,
    CountUniqueMetadataByFilterTest,
    GetMetadataFieldsInfoTest,
    GetMetadataFieldMinMaxTest,
    GetMetadataFieldUniqueValuesTest,
):
    """Parametrized over the embedded store and Elasticsearch (see conftest.py)."""

    @pytest.fixture
    def document_store(self, contract_store):
        return contract_store

    def assert_documents_are_equal(self, received: list[Document], expected: list[Document]) -> None:
        # Elasticsearch returns documents in its own order and sets scores; compare as sets without scores.
        def key(doc: Document) -> str:
            return doc.id

        received = sorted((dataclasses.replace(d, score=None) for d in received), key=key)
        assert received == sorted(expected, key=key)

    def test_write_documents(self, document_store) -> None:
        # docqa's default policy for both stores: NONE behaves like FAIL.
        doc = Document(content="test doc")
        assert document_store.write_documents([doc]) == 1
        with pytest.raises(DuplicateDocumentError):
            document_store.write_documents([doc])
        self.assert_documents_are_equal(document_store.filter_documents(), [doc])


class TestDocumentStoreConformanceAsync(
    CountDocumentsAsyncTest,
    WriteDocumentsAsyncTest,
    DeleteDocumentsAsyncTest,
    FilterDocumentsAsyncTest,
    DeleteAllAsyncTest,
):
    """The async half of the protocol (what FastAPI handlers call), same stores."""

    @pytest.fixture
    def document_store(self, contract_store):
        return contract_store

    def assert_documents_are_equal(self, received: list[Document], expected: list[Document]) -> None:
        TestDocumentStoreConformance.assert_documents_are_equal(self, received, expected)

    async def test_write_documents_async(self, document_store) -> None:
        doc = Document(content="test doc")
        assert await document_store.write_documents_async([doc]) == 1
        with pytest.raises(DuplicateDocumentError):
            await document_store.write_documents_async([doc])
        self.assert_documents_are_equal(await document_store.filter_documents_async(), [doc])
