"""BM25 with MaxScore pruning returns the top k of the full computation (every posting of every query term
summed), with and without filters and tombstones, over in-memory and merged segments."""

from __future__ import annotations

import numpy as np
import pytest

from docqa.stores.search_index import IndexedRow, SearchIndex
from docqa.stores.tokenizer import tokenize

VOCABULARY = [f"w{i:03d}" for i in range(300)]


def rows(count: int, start: int, rng: np.random.Generator) -> list[IndexedRow]:
    # Zipf-like term frequencies: a few terms in most rows (what pruning skips), many rare ones.
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1)
    weights /= weights.sum()
    found = []
    for i in range(start, start + count):
        words = rng.choice(VOCABULARY, size=int(rng.integers(3, 40)), p=weights)
        found.append(IndexedRow(seq=i + 1, id=f"d{i}", content=" ".join(words), meta={"group": f"g{i % 3}"},
                                embedding=None))
    return found


def full_scores(index: SearchIndex, query: str, filters) -> dict[int, float]:
    """Every matching row's BM25 score, summing all postings (no pruning)."""
    terms = np.asarray(sorted({index.vocab.lookup(t) for t in tokenize(query)} - {None}), dtype=np.int64)
    df = index._document_frequencies(terms)
    idf = np.log1p((index._indexed_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
    scores: dict[int, float] = {}
    for segment in index.segments:
        mask = index._mask(segment, filters, lambda seqs, fields: [{} for _ in seqs])
        found, cols = segment.columns(terms)
        for f, c in zip(found.tolist(), cols.tolist(), strict=True):
            start, end = int(segment.indptr[c]), int(segment.indptr[c + 1])
            for row, weight in zip(segment.indices[start:end].tolist(), segment.weights[start:end], strict=True):
                if mask[row]:
                    seq = int(segment.seqs[row])
                    scores[seq] = scores.get(seq, 0.0) + float(weight * idf[f])
    return scores


@pytest.mark.parametrize("filters", [None, {"field": "meta.group", "operator": "==", "value": "g1"}])
def test_pruned_top_k_equals_the_full_computation(filters):
    rng = np.random.default_rng(3)
    index = SearchIndex(k1=1.5, b=0.75, similarity="cosine")
    for start in range(0, 3000, 500):
        index.add(rows(500, start, rng))
    index.delete(list(range(1, 3000, 7)))
    queries = [" ".join(rng.choice(VOCABULARY[:60], size=int(rng.integers(2, 9)))) for _ in range(60)]
    queries += ["w000 w001 w002 w250", "w299 w000", "w001"]
    for query in queries:
        for top_k in (1, 10, 50):
            got = index.bm25(query, top_k=top_k, filters=filters, load_fields=lambda s, f: [{} for _ in s])
            want = sorted(full_scores(index, query, filters).items(), key=lambda item: -item[1])[:top_k]
            assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
            last = want[-1][1]
            assert {q for q, s in got if s > last + 1e-9} == {q for q, s in want if s > last + 1e-9}
