"""ONNX embedding backends against PyTorch, their one-time export, and the store's refusal to mix embedding spaces.

The exports of the packaged model happen once per module (about 20 s each on two cores), into a temporary data dir.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from haystack import Document

import docqa.embedding as embedding
from docqa.embedding import (
    INT8_MICRO_BATCH,
    INT8_RECIPE,
    OnnxDocumentEmbedder,
    OnnxEncoder,
    OnnxTextEmbedder,
    build_document_embedder,
    build_text_embedder,
    embedding_space,
    ensure_onnx_export,
    onnx_export_dir,
)
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore, EmbeddingSpaceMismatchError
from docqa.stores.factory import build_document_store

TEXTS = [
    "The cat sat on the warm windowsill all afternoon.",
    "Quarterly earnings rose because of strong cloud sales.",
    "Who was the director of the film that won the Palme d'Or in 1994?",
    "Hemoglobin A1c 7.2 % (abnormal), measured on 2019-03-04.",
    "short",
    " ".join(["a passage longer than the model's maximum sequence length"] * 60),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def torch_vectors(data_dir) -> np.ndarray:
    embedder = build_document_embedder(Settings(data_dir=data_dir, embedding_backend="torch"))
    embedder.warm_up()
    docs = embedder.run(documents=[Document(content=t) for t in TEXTS])["documents"]
    return np.asarray([d.embedding for d in docs])


class TestOnnxBackends:
    @pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
    def test_document_embeddings_agree_with_pytorch(self, data_dir, torch_vectors, backend):
        embedder = build_document_embedder(Settings(data_dir=data_dir, embedding_backend=backend))
        assert isinstance(embedder, OnnxDocumentEmbedder)
        docs = [Document(content=t, meta={"i": i}) for i, t in enumerate(TEXTS)]
        out = embedder.run(documents=docs)["documents"]
        assert [d.meta for d in out] == [d.meta for d in docs]
        vectors = np.asarray([d.embedding for d in out])
        cosine = (vectors * torch_vectors).sum(axis=1)
        if backend == "onnx":
            assert cosine.min() >= 0.99
            assert np.abs(vectors - torch_vectors).max() < 1e-4
        else:
            # int8 weights: 0.99 on average; a one-word text comes out lowest, and how low depends on the CPU's
            # int8 instructions (0.988 measured with VNNI, 0.9796 on an AVX2-only EPYC).
            assert cosine.mean() >= 0.99
            assert cosine.min() >= 0.975

    def test_query_embedding_is_normalised_and_matches_document_embedding(self, data_dir):
        settings = Settings(data_dir=data_dir, embedding_backend="onnx")
        text_embedder = build_text_embedder(settings)
        assert isinstance(text_embedder, OnnxTextEmbedder)
        vector = np.asarray(text_embedder.run(text=TEXTS[0])["embedding"])
        assert vector.shape == (384,)
        assert float(vector @ vector) == pytest.approx(1.0, abs=1e-5)
        doc = build_document_embedder(settings).run(documents=[Document(content=TEXTS[0])])["documents"][0]
        assert np.allclose(vector, doc.embedding, atol=1e-5)

    def test_query_and_document_embedders_share_one_session(self, data_dir):
        # A deployment holds one embedder per graph (the retriever's, ReSP's repeat guard's, ingestion's): they
        # must not each load the model.
        settings = Settings(data_dir=data_dir, embedding_backend="onnx-int8")
        query, document = build_text_embedder(settings), build_document_embedder(settings)
        query.warm_up()
        document.warm_up()
        assert query.encoder is document.encoder
        other_threads = build_text_embedder(settings.model_copy(update={"embedding_threads": 3}))
        other_threads.warm_up()
        assert other_threads.encoder is not query.encoder
        vector = query.run(text=TEXTS[1])["embedding"]
        assert document.run(documents=[Document(content=TEXTS[1])])["documents"][0].embedding == vector

    def test_export_is_recorded_and_reused(self, data_dir, monkeypatch):
        model = embedding.embedding_model_path(Settings())
        export = ensure_onnx_export(model, str(data_dir / "models"))
        assert (export / "model.onnx").is_file()
        assert '"max_abs_diff"' in (export / "export.json").read_text()
        monkeypatch.setattr(embedding, "_export_fp32", lambda *a: pytest.fail("exported twice"))
        assert ensure_onnx_export(model, str(data_dir / "models")) == export

    def test_int8_export_is_fused_and_records_its_recipe(self, data_dir):
        model = embedding.embedding_model_path(Settings())
        export = ensure_onnx_export(model, str(data_dir / "models"), quantize=True)
        assert export.name == f"onnx-int8v{INT8_RECIPE}"
        assert sorted(p.name for p in export.iterdir()) == ["export.json", "model.onnx"]
        report = json.loads((export / "export.json").read_text())
        assert report["recipe"] == INT8_RECIPE
        # One fused attention per layer of all-MiniLM-L6-v2: the speed of the recipe rests on the fusion.
        assert report["fused_operators"]["Attention"] == 6
        assert report["mean_cosine"] >= embedding.INT8_MIN_MEAN_COSINE
        operators = {node.op_type for node in onnx.load(str(export / "model.onnx")).graph.node}
        assert {"QAttention", "MatMulInteger", "EmbedLayerNormalization"} <= operators  # embedding table in float
        assert "QEmbedLayerNormalization" not in operators

    def test_int8_session_runs_in_micro_batches_whatever_the_batch_size(self, data_dir):
        model = embedding.embedding_model_path(Settings())
        export = ensure_onnx_export(model, str(data_dir / "models"), quantize=True)
        encoder = OnnxEncoder(model, export / "model.onnx", threads=1)
        assert encoder.quantized
        assert encoder.micro_batch == INT8_MICRO_BATCH
        batched = encoder.encode(TEXTS, batch_size=32)
        alone = np.concatenate([encoder.encode([t], batch_size=1) for t in TEXTS])
        assert np.abs(batched - alone).max() < 1e-5
        # Padded into one call, int8 activations are quantised with the neighbours' scale: the vectors move.
        padded = OnnxEncoder(model, export / "model.onnx", threads=1, micro_batch=len(TEXTS)).encode(TEXTS)
        assert np.abs(padded - alone).max() > 1e-4
        # The query embedder gives a text the vector the document embedder stored for it.
        settings = Settings(data_dir=data_dir, embedding_backend="onnx-int8")
        query = build_text_embedder(settings).run(text=TEXTS[2])["embedding"]
        assert np.abs(np.asarray(query) - batched[2]).max() < 1e-6

    def test_fp32_session_batches_as_asked(self, data_dir):
        model = embedding.embedding_model_path(Settings())
        encoder = OnnxEncoder(model, ensure_onnx_export(model, str(data_dir / "models")) / "model.onnx", threads=1)
        assert not encoder.quantized
        assert encoder.micro_batch == 0
        with pytest.raises(ValueError, match="micro_batch"):
            OnnxEncoder(model, ensure_onnx_export(model, str(data_dir / "models")) / "model.onnx", micro_batch=-1)

    def test_components_round_trip_through_to_dict(self, data_dir):
        embedder = OnnxDocumentEmbedder(model="/m", cache_dir=str(data_dir), quantize=True, threads=1, batch_size=8)
        again = OnnxDocumentEmbedder.from_dict(embedder.to_dict())
        assert (again.model, again.quantize, again.threads, again.batch_size) == ("/m", True, 1, 8)
        text = OnnxTextEmbedder.from_dict(OnnxTextEmbedder(model="/m", cache_dir=str(data_dir)).to_dict())
        assert text.model == "/m"
        assert not text.quantize


def test_concurrent_exports_run_once_and_never_expose_a_partial_directory(tmp_path, monkeypatch):
    calls = []
    barrier = threading.Barrier(4)

    def fake_export(model_path, destination):
        calls.append(model_path)
        destination.write_bytes(b"onnx")

    monkeypatch.setattr(embedding, "_export_fp32", fake_export)
    monkeypatch.setattr(embedding, "_verify", lambda *a: {"ok": True})
    model = embedding.embedding_model_path(Settings())
    results: list[Path] = []

    def worker():
        barrier.wait()
        results.append(ensure_onnx_export(model, str(tmp_path)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(set(results)) == 1
    assert sorted(p.name for p in results[0].iterdir()) == ["export.json", "model.onnx"]
    assert not [p for p in results[0].parent.iterdir() if p.name.startswith(".")]


def test_int8_export_falls_back_to_unsigned_weights_and_never_keeps_a_disagreeing_one(tmp_path, monkeypatch):
    model = embedding.embedding_model_path(Settings())
    real_verify = embedding._verify
    verified: list[str] = []

    def verify(model_path, export_dir, quantize):
        verified.append("call")
        if len(verified) == 1 or "reject all" in verified:
            raise embedding.ExportDisagreesError("cosine mean 0.9800")  # as saturated int8 products do without VNNI
        return real_verify(model_path, export_dir, quantize)

    monkeypatch.setattr(embedding, "_verify", verify)
    verified.append("reject all")
    with pytest.raises(embedding.ExportDisagreesError):
        ensure_onnx_export(model, str(tmp_path), quantize=True)
    assert not onnx_export_dir(model, str(tmp_path), quantize=True).exists()
    assert not [p for p in onnx_export_dir(model, str(tmp_path), True).parent.iterdir() if p.name.startswith(".")]

    verified.clear()
    export = ensure_onnx_export(model, str(tmp_path), quantize=True)
    report = json.loads((export / "export.json").read_text())
    assert (report["weights"], len(verified)) == ("uint8", 2)
    assert report["rejected"] == ["int8: cosine mean 0.9800"]
    assert OnnxEncoder(model, export / "model.onnx", threads=1).quantized


class TestEmbeddingSpaces:
    def test_torch_and_onnx_share_a_space_and_int8_does_not(self):
        spaces = {b: embedding_space(Settings(embedding_backend=b)) for b in ("torch", "onnx", "onnx-int8")}
        assert spaces["torch"] == spaces["onnx"]
        assert spaces["torch"].endswith(":fp32")
        assert spaces["onnx-int8"].endswith(f":int8v{INT8_RECIPE}")

    @pytest.mark.parametrize("old_space", ["int8", "int8v2"])  # what recipes 1 and 2 recorded
    def test_store_embedded_by_an_older_int8_recipe_refuses_the_current_one(self, tmp_path, old_space):
        model = embedding.embedding_model_path(Settings())
        assert onnx_export_dir(model, str(tmp_path), quantize=True).name != f"onnx-{old_space}"
        current = embedding_space(Settings(embedding_backend="onnx-int8"))
        old = current.rsplit(":", 1)[0] + ":" + old_space
        path = str(tmp_path / "documents.sqlite3")
        written = EmbeddedDocumentStore(path=path, embedding_space=old)
        written.write_documents([Document(id="a", content="alpha", embedding=[1.0, 0.0])])
        written.close()
        store = EmbeddedDocumentStore(path=path, embedding_space=current)
        with pytest.raises(EmbeddingSpaceMismatchError, match=f"holds embeddings of {re.escape(old)}.*{current}"):
            store.write_documents([Document(id="b", content="beta", embedding=[0.0, 1.0])])
        with pytest.raises(EmbeddingSpaceMismatchError):
            store.embedding_retrieval([1.0, 0.0])
        store.close()

    def test_factory_passes_the_configured_space(self, tmp_path):
        store = build_document_store(Settings(data_dir=tmp_path, embedding_backend="onnx-int8"))
        assert store.embedding_space == embedding_space(Settings(embedding_backend="onnx-int8"))
        store.close()

    def test_mismatched_space_is_refused_for_writes_and_dense_queries(self, tmp_path):
        path = str(tmp_path / "documents.sqlite3")
        fp32 = EmbeddedDocumentStore(path=path, embedding_space="m:abc:fp32")
        fp32.write_documents([Document(id="a", content="alpha", embedding=[1.0, 0.0])])
        assert fp32.recorded_embedding_space() == "m:abc:fp32"

        int8 = EmbeddedDocumentStore(path=path, embedding_space="m:abc:int8")
        with pytest.raises(EmbeddingSpaceMismatchError, match=r"holds embeddings of m:abc:fp32.*m:abc:int8"):
            int8.write_documents([Document(id="b", content="beta", embedding=[0.0, 1.0])])
        with pytest.raises(EmbeddingSpaceMismatchError, match="DOCQA_EMBEDDING_BACKEND"):
            int8.embedding_retrieval([1.0, 0.0])
        # Nothing was written; text-only writes and BM25 need no embeddings and stay allowed.
        assert fp32.count_documents() == 1
        int8.write_documents([Document(id="c", content="gamma")])
        assert [d.id for d in int8.bm25_retrieval("gamma")] == ["c"]
        assert [d.id for d in fp32.embedding_retrieval([1.0, 0.0], top_k=1)] == ["a"]

        int8.delete_all_documents()
        int8.write_documents([Document(id="b", content="beta", embedding=[0.0, 1.0])])
        assert int8.recorded_embedding_space() == "m:abc:int8"
        with pytest.raises(EmbeddingSpaceMismatchError):
            fp32.embedding_retrieval([1.0, 0.0])
        for store in (fp32, int8):
            store.close()

    def test_auto_takes_int8_for_a_new_store_and_keeps_an_existing_store_on_its_backend(self, tmp_path):
        fresh = Settings(data_dir=tmp_path / "new")
        assert fresh.embedding_backend == "auto"
        assert embedding.resolve_backend(fresh) == "onnx-int8"
        assert embedding_space(fresh) == embedding_space(Settings(embedding_backend="onnx-int8"))

        old = tmp_path / "old"
        torch_store = build_document_store(Settings(data_dir=old, embedding_backend="torch"))
        torch_store.write_documents([Document(id="a", content="alpha", embedding=[1.0, 0.0])])
        torch_store.close()
        upgraded = Settings(data_dir=old)
        assert embedding.resolve_backend(upgraded) == "torch"
        store = build_document_store(upgraded)
        assert [d.id for d in store.embedding_retrieval([1.0, 0.0], top_k=1)] == ["a"]  # no mismatch refusal
        store.close()
        # An explicit choice still wins, and is refused by that store as before.
        assert embedding.resolve_backend(Settings(data_dir=old, embedding_backend="onnx-int8")) == "onnx-int8"
        # Elasticsearch records no space: auto cannot read one there.
        assert embedding.resolve_backend(Settings(data_dir=old, elasticsearch_url="http://es:9200")) == "onnx-int8"

    def test_exports_are_shared_by_data_dirs_in_the_user_cache(self, tmp_path, monkeypatch):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        assert embedding.export_cache_dir(Settings(data_dir=tmp_path / "a")) == tmp_path / "cache" / "docqa" / "models"
        assert embedding.export_cache_dir(Settings(data_dir=tmp_path / "b")) == tmp_path / "cache" / "docqa" / "models"
        assert embedding.export_cache_dir(Settings(embedding_cache_dir=tmp_path / "x")) == tmp_path / "x"
        (tmp_path / "file").write_text("not a directory")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
        assert embedding.export_cache_dir(Settings(data_dir=tmp_path / "a")) == tmp_path / "a" / "models"

    def test_store_without_a_configured_space_records_and_checks_nothing(self, tmp_path):
        store = EmbeddedDocumentStore(path=str(tmp_path / "s.sqlite3"))
        store.write_documents([Document(id="a", content="alpha", embedding=[1.0, 0.0])])
        assert store.recorded_embedding_space() is None
        assert EmbeddedDocumentStore.from_dict(store.to_dict()).embedding_space is None
        store.close()
