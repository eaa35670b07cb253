"""The hybrid retriever end to end on the embedded store with the packaged MiniLM model (loads the model once)."""

from __future__ import annotations

import pytest
from haystack import Document

from docqa.access import AccessScope
from docqa.embedding import build_document_embedder, build_text_embedder, embedding_model_path
from docqa.errors import ModelNotFoundError
from docqa.runtime import Runtime
from docqa.settings import Settings

CORPUS = [
    ("The cat sat on the warm windowsill all afternoon.", "acme"),
    ("Quarterly earnings rose because of strong cloud sales.", "acme"),
    ("Feline pets enjoy sleeping in sunny spots.", "acme"),
    ("Felines nap in sunny places, says the rival company memo.", "globex"),
]


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    settings = Settings(data_dir=tmp_path_factory.mktemp("data"), top_k=2, retrieval_candidates=4)
    runtime = Runtime(settings)
    embedder = build_document_embedder(settings)
    embedder.warm_up()
    docs = [Document(content=text, meta={"tenant": tenant, "access": ["everyone"]}) for text, tenant in CORPUS]
    runtime.document_store.write_documents(embedder.run(documents=docs)["documents"])
    return runtime


def test_paraphrase_without_shared_words_is_found_and_other_tenants_are_not(runtime):
    retriever = runtime.retriever()
    found = retriever.run(query="Where do cats like to rest?", filters=AccessScope(tenant="acme").to_filters())
    contents = [d.content for d in found["documents"]]
    assert len(contents) == 2
    assert "Feline pets enjoy sleeping in sunny spots." in contents
    assert all("rival" not in c for c in contents)


def test_embeddings_are_normalised(runtime):
    embedder = build_text_embedder(runtime.settings)
    embedder.warm_up()
    vector = embedder.run(text="hello")["embedding"]
    assert len(vector) == 384
    assert sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-4)


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="embedding model not found"):
        embedding_model_path(Settings(embedding_model=str(tmp_path / "nope")))
