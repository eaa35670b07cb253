"""The in-memory search side of the embedded store: immutable segments plus tombstones, rebuilt from SQLite.

Each segment holds the documents of one catch-up batch: a CSC term-frequency matrix with precomputed BM25
term weights (BM25 over a sparse matrix is a handful of numpy operations per query term), float32 embedding
blocks (one per dimension), the metadata used by filters, and an alive mask. Deleting or overwriting a
document only flips its alive bit; segments are merged when there are many of them or many dead rows.

Dense search is exact (one matrix-vector product per block) in blocks smaller than `ann_min_chunks` rows and
approximate in larger ones: an HNSW graph (hnswlib, inner product), built on the block's first dense query
and kept until the segment is merged away. Blocks above `ANN_SYNC_BUILD_MAX` rows build their graph in a
background thread (minutes at a million chunks) and are searched exactly until it is ready.
The graph only proposes candidates: they are over-fetched, filtered
exactly by the same masks as exact search (tenant, access, collection, dates, tombstones) and re-scored exactly,
so scores equal exact search's. A filter keeping under `ANN_MIN_FRACTION` of the block, or an over-fetch that
leaves fewer than `top_k` matching candidates, falls back to exact search over the matching rows.

Statistics follow Lucene: document frequencies and the average length count tombstoned rows until the next
merge, and a segment's length normalisation uses the average length known when it was built.

Usage:
    index = SearchIndex(k1=1.5, b=0.75, similarity="cosine")
    index.add([IndexedRow(seq=1, id="a", content="alpha beta", meta={}, embedding=None)])
    index.bm25("alpha", top_k=5, filters=None, load_fields=loader)  # -> [(1, 0.28)]
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import sparse

from docqa.stores.filters import StoredRecord, compile_filters, field_path, referenced_fields
from docqa.stores.tokenizer import STOP_WORDS, TOKEN, tokenize

# Loads non-meta Document fields (content, blob, ...) for the given sequence numbers, for filters naming them.
FieldLoader = Callable[[Sequence[int], set[str]], list[dict[str, Any]]]

MAX_SEGMENTS = 8
MAX_DEAD_FRACTION = 0.25
FILTER_CACHE_SIZE = 32
# HNSW: graph degree, construction and (minimum) query beam width; filtered queries over-fetch
# ANN_OVERFETCH x top_k / (fraction of the block the filter keeps) candidates.
ANN_M = 16
ANN_EF_CONSTRUCTION = 100
ANN_EF_SEARCH = 128
ANN_OVERFETCH = 3.0
ANN_MIN_FRACTION = 0.05
ANN_SYNC_BUILD_MAX = 20_000


@dataclass
class IndexedRow:
    seq: int
    id: str
    content: str | None
    meta: dict[str, Any]
    embedding: np.ndarray | None


@dataclass
class DenseBlock:
    positions: np.ndarray  # rows of the segment that have an embedding of this dimension
    matrix: np.ndarray  # float32 (len(positions), dim), unit rows when similarity is cosine
    ann: Any = None  # hnswlib index over `matrix` rows, built on first use when the block is large enough
    ann_builder: threading.Thread | None = None  # background build of `ann` for large blocks


@dataclass
class Segment:
    seqs: np.ndarray
    ids: list[str]
    metas: list[dict[str, Any]]
    alive: np.ndarray
    tf: sparse.csc_matrix
    doc_len: np.ndarray
    weights: np.ndarray
    dense: dict[int, DenseBlock]
    filter_masks: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)
    # meta key -> text value -> positions holding it (a segment's metas never change), for `==` fast paths.
    value_index: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.ids)


class SearchIndex:
    """BM25 and dense search over segments; not thread-safe (the store serialises access)."""

    def __init__(self, *, k1: float, b: float, similarity: str, ann_min_chunks: int | None = None) -> None:
        """:param ann_min_chunks: blocks of at least this many embeddings are searched through HNSW (None: never)."""
        self.k1 = k1
        self.b = b
        self.similarity = similarity
        self.ann_min_chunks = ann_min_chunks
        # Looking up an unseen term assigns it the next id; queries test membership first and never add terms.
        self.vocab = _Vocabulary()
        self._stop = np.zeros(0, dtype=bool)
        self.segments: list[Segment] = []
        self._df = np.zeros(0, dtype=np.int64)
        self._indexed_docs = 0
        self._indexed_len = 0.0

    @property
    def live_count(self) -> int:
        return int(sum(int(s.alive.sum()) for s in self.segments))

    # ---- updates -------------------------------------------------------------------------------------------

    def add(self, rows: list[IndexedRow]) -> None:
        if not rows:
            return
        segment = self._build_segment(rows)
        self.segments.append(segment)
        self._maybe_merge()

    def delete(self, seqs: Sequence[int]) -> None:
        if not len(seqs):
            return
        wanted = np.asarray(seqs, dtype=np.int64)
        for segment in self.segments:
            idx = np.searchsorted(segment.seqs, wanted)
            inside = idx < segment.size
            idx = idx[inside]
            hits = idx[segment.seqs[idx] == wanted[inside]]
            segment.alive[hits] = False
        self._maybe_merge()

    def _build_segment(self, rows: list[IndexedRow]) -> Segment:
        # Hot path of index builds: one regex pass and one C-level dict lookup per token; stop words are
        # dropped afterwards in numpy, through a per-term flag.
        term_of = self.vocab.__getitem__
        term_ids: list[int] = []
        counts = np.zeros(len(rows), dtype=np.int64)
        for i, row in enumerate(rows):
            ids = list(map(term_of, TOKEN.findall(row.content.lower()))) if row.content else []
            term_ids.extend(ids)
            counts[i] = len(ids)
        terms = np.asarray(term_ids, dtype=np.int64)
        doc_rows = np.repeat(np.arange(len(rows)), counts)
        keep = ~self._stop_flags()[terms]
        terms, doc_rows = terms[keep], doc_rows[keep]
        doc_len = np.bincount(doc_rows, minlength=len(rows)).astype(np.float32)
        tf = sparse.csc_matrix(
            (np.ones(len(terms), dtype=np.float32), (doc_rows, terms)),
            shape=(len(rows), len(self.vocab)),
            dtype=np.float32,
        )
        tf.sum_duplicates()
        segment = Segment(
            seqs=np.asarray([r.seq for r in rows], dtype=np.int64),
            ids=[r.id for r in rows],
            metas=[r.meta for r in rows],
            alive=np.ones(len(rows), dtype=bool),
            tf=tf,
            doc_len=doc_len,
            weights=np.zeros(0, dtype=np.float32),
            dense=self._dense_blocks([r.embedding for r in rows]),
        )
        self._count_stats(segment, sign=1)
        self._reweight(segment)
        return segment

    def _stop_flags(self) -> np.ndarray:
        if len(self._stop) < len(self.vocab):
            terms = list(self.vocab)[len(self._stop) :]
            self._stop = np.concatenate([self._stop, np.fromiter((t in STOP_WORDS for t in terms), dtype=bool)])
        return self._stop

    def _dense_blocks(self, embeddings: list[np.ndarray | None]) -> dict[int, DenseBlock]:
        by_dim: dict[int, list[int]] = {}
        for pos, emb in enumerate(embeddings):
            if emb is not None and emb.size:
                by_dim.setdefault(int(emb.size), []).append(pos)
        blocks = {}
        for dim, positions in by_dim.items():
            matrix = np.stack([embeddings[p] for p in positions]).astype(np.float32, copy=False)
            if self.similarity == "cosine":
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = matrix / np.where(norms == 0, 1.0, norms)
            blocks[dim] = DenseBlock(positions=np.asarray(positions, dtype=np.int64), matrix=matrix)
        return blocks

    def _count_stats(self, segment: Segment, sign: int) -> None:
        n_terms = segment.tf.shape[1]
        if len(self._df) < len(self.vocab):
            self._df = np.concatenate([self._df, np.zeros(len(self.vocab) - len(self._df), dtype=np.int64)])
        self._df[:n_terms] += sign * np.diff(segment.tf.indptr)
        self._indexed_docs += sign * segment.size
        self._indexed_len += sign * float(segment.doc_len.sum())

    def _reweight(self, segment: Segment) -> None:
        avgdl = self._indexed_len / self._indexed_docs if self._indexed_docs else 1.0
        norm = self.k1 * (1.0 - self.b + self.b * segment.doc_len / max(avgdl, 1e-9))
        tf = segment.tf.data
        segment.weights = (tf * (self.k1 + 1.0) / (tf + norm[segment.tf.indices])).astype(np.float32)

    def _maybe_merge(self) -> None:
        total = sum(s.size for s in self.segments)
        dead = total - self.live_count
        if total and dead / total > MAX_DEAD_FRACTION:
            self._merge(list(self.segments))
        elif len(self.segments) > MAX_SEGMENTS:
            # Merge the small segments; fold the largest in only when it would not dominate the result.
            ordered = sorted(self.segments, key=lambda s: s.size)
            small, largest = ordered[:-1], ordered[-1]
            self._merge(ordered if sum(s.size for s in small) >= largest.size else small)

    def _merge(self, chosen: list[Segment]) -> None:
        chosen = sorted(chosen, key=lambda s: int(s.seqs[0]) if s.size else 0)
        keep = [s for s in self.segments if all(s is not c for c in chosen)]
        for segment in chosen:
            self._count_stats(segment, sign=-1)
        n_terms = len(self.vocab)
        parts = []
        for segment in chosen:
            tf = segment.tf.copy()
            tf.resize((segment.size, n_terms))
            parts.append(tf.tocsr()[np.flatnonzero(segment.alive)])
        alive_pos = [np.flatnonzero(s.alive) for s in chosen]
        embeddings: list[np.ndarray | None] = []
        for segment, positions in zip(chosen, alive_pos, strict=True):
            by_pos: dict[int, np.ndarray] = {}
            for block in segment.dense.values():
                for row, pos in enumerate(block.positions):
                    by_pos[int(pos)] = block.matrix[row]
            embeddings.extend(by_pos.get(int(p)) for p in positions)
        merged = Segment(
            seqs=np.concatenate([s.seqs[p] for s, p in zip(chosen, alive_pos, strict=True)]),
            ids=[s.ids[i] for s, p in zip(chosen, alive_pos, strict=True) for i in p],
            metas=[s.metas[i] for s, p in zip(chosen, alive_pos, strict=True) for i in p],
            alive=np.ones(sum(len(p) for p in alive_pos), dtype=bool),
            tf=sparse.vstack(parts, format="csc", dtype=np.float32) if parts else sparse.csc_matrix((0, n_terms)),
            doc_len=np.concatenate([s.doc_len[p] for s, p in zip(chosen, alive_pos, strict=True)]),
            weights=np.zeros(0, dtype=np.float32),
            # Already-normalised rows stay unit rows, so re-normalising is harmless.
            dense=self._dense_blocks(embeddings),
        )
        merged.tf.sort_indices()
        self._count_stats(merged, sign=1)
        self.segments = sorted([*keep, merged], key=lambda s: int(s.seqs[0]) if s.size else 0)
        self.segments = [s for s in self.segments if s.size]
        for segment in self.segments:
            self._reweight(segment)

    # ---- queries -------------------------------------------------------------------------------------------

    def matching(self, filters: dict[str, Any] | None, load_fields: FieldLoader) -> list[tuple[Segment, np.ndarray]]:
        """Alive documents matching `filters`, as (segment, positions) pairs."""
        return [(s, np.flatnonzero(self._mask(s, filters, load_fields))) for s in self.segments]

    def matching_seqs(self, filters: dict[str, Any] | None, load_fields: FieldLoader) -> np.ndarray:
        parts = [s.seqs[p] for s, p in self.matching(filters, load_fields)]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def bm25(
        self, query: str, *, top_k: int, filters: dict[str, Any] | None, load_fields: FieldLoader
    ) -> list[tuple[int, float]]:
        """Top documents by BM25 (OR over the query terms) as (seq, score), best first."""
        known = sorted({self.vocab[t] for t in tokenize(query) if t in self.vocab})
        if not known or not self._indexed_docs:
            return []
        df = self._df[known].astype(np.float64)
        idf = np.log1p((self._indexed_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
        candidates: list[tuple[int, float]] = []
        for segment in self.segments:
            indptr = segment.tf.indptr
            rows_parts, weight_parts = [], []
            for term, term_idf in zip(known, idf, strict=True):
                if term + 1 >= len(indptr):
                    continue
                start, end = indptr[term], indptr[term + 1]
                if start != end:
                    rows_parts.append(segment.tf.indices[start:end])
                    weight_parts.append(segment.weights[start:end] * term_idf)
            if not rows_parts:
                continue
            scores = np.bincount(
                np.concatenate(rows_parts), weights=np.concatenate(weight_parts), minlength=segment.size
            )
            hits = np.flatnonzero(scores)
            hits = hits[self._mask(segment, filters, load_fields)[hits]]
            candidates.extend(_top(segment.seqs[hits], scores[hits], top_k))
        return sorted(candidates, key=lambda c: -c[1])[:top_k]

    def dense(
        self, query_embedding: Sequence[float], *, top_k: int, filters: dict[str, Any] | None, load_fields: FieldLoader
    ) -> list[tuple[int, float]]:
        """Top documents by dot product or cosine similarity as (seq, score), best first."""
        query = np.asarray(query_embedding, dtype=np.float32)
        if self.similarity == "cosine":
            norm = float(np.linalg.norm(query))
            query = query / (norm or 1.0)
        candidates: list[tuple[int, float]] = []
        for segment in self.segments:
            block = segment.dense.get(int(query.size))
            if block is None:
                continue
            usable = self._mask(segment, filters, load_fields)[block.positions]
            if not usable.any():
                continue
            rows = self._ann_rows(block, query, usable, top_k)
            if rows is None:
                scores = block.matrix @ query
                positions = block.positions[usable]
                candidates.extend(_top(segment.seqs[positions], scores[usable], top_k))
            else:
                scores = block.matrix[rows] @ query
                candidates.extend(_top(segment.seqs[block.positions[rows]], scores, top_k))
        return sorted(candidates, key=lambda c: -c[1])[:top_k]

    def _ann_rows(self, block: DenseBlock, query: np.ndarray, usable: np.ndarray, top_k: int) -> np.ndarray | None:
        """Block rows holding the approximate top `top_k` among `usable` rows, or None to search exactly."""
        size = len(block.positions)
        if self.ann_min_chunks is None or size < max(self.ann_min_chunks, 1):
            return None
        n_usable = int(usable.sum())
        fraction = n_usable / size
        if fraction < ANN_MIN_FRACTION:
            return None
        fetch = min(size, max(top_k, int(np.ceil(ANN_OVERFETCH * top_k / fraction))))
        index = self._ann_index(block)
        if index is None:  # still being built
            return None
        index.set_ef(max(ANN_EF_SEARCH, fetch))
        try:
            labels, _ = index.knn_query(query[None, :], k=fetch, num_threads=1)
        except RuntimeError:  # the graph could not return `fetch` results (tiny or degenerate blocks)
            return None
        rows = labels[0].astype(np.int64)
        rows = rows[usable[rows]]
        if len(rows) < min(top_k, n_usable):
            return None
        return rows

    def _ann_index(self, block: DenseBlock) -> Any:
        """The block's HNSW graph; None while a large block's graph is built in the background."""
        if block.ann is None:
            if len(block.positions) <= ANN_SYNC_BUILD_MAX:
                block.ann = _build_hnsw(block.matrix)
            elif block.ann_builder is None:
                block.ann_builder = threading.Thread(
                    target=_build_in_background, args=(block,), name="docqa-hnsw-build", daemon=True
                )
                block.ann_builder.start()
        return block.ann

    def _mask(self, segment: Segment, filters: dict[str, Any] | None, load_fields: FieldLoader) -> np.ndarray:
        if not filters:
            return segment.alive
        key = json.dumps(filters, sort_keys=True, default=str)
        mask = segment.filter_masks.get(key)
        if mask is None:
            mask = _evaluate(segment, filters, load_fields)
            segment.filter_masks[key] = mask
            while len(segment.filter_masks) > FILTER_CACHE_SIZE:
                segment.filter_masks.popitem(last=False)
        else:
            segment.filter_masks.move_to_end(key)
        return mask & segment.alive


class _Vocabulary(dict[str, int]):
    """term -> id; a missing term gets the next id (C-speed lookups for known terms while indexing)."""

    def __missing__(self, term: str) -> int:
        term_id = self[term] = len(self)
        return term_id


# Haystack's `==` also equates two ISO dates written differently, which a value lookup would miss.
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _equalities(filters: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """`meta.KEY == "text"` and `meta.KEY in ["text", ...]` conditions every match must satisfy (through nested
    ANDs only), as (key, the values one of which it must hold)."""
    if filters.get("operator") == "AND" and isinstance(filters.get("conditions"), list):
        return [pair for child in filters["conditions"] if isinstance(child, dict) for pair in _equalities(child)]
    value, name, operator = filters.get("value"), filters.get("field"), filters.get("operator")
    values = [value] if operator == "==" else value if operator == "in" and isinstance(value, list) else None
    if not values or not isinstance(name, str) or not all(isinstance(v, str) and not _ISO_DATE.match(v)
                                                          for v in values):
        return []
    path = field_path(name)
    if len(path) != 2 or path[0] != "meta":
        return []
    return [(path[1], values)]


def _value_positions(segment: Segment, key: str) -> dict[str, np.ndarray]:
    index = segment.value_index.get(key)
    if index is None:
        found: dict[str, list[int]] = {}
        for position, meta in enumerate(segment.metas):
            value = meta.get(key)
            # A list matches when any item does (see `compile_filters`).
            for item in {value} if isinstance(value, str) else set(value) if isinstance(value, list) else ():
                if isinstance(item, str):
                    found.setdefault(item, []).append(position)
        index = segment.value_index[key] = {v: np.asarray(p, dtype=np.int64) for v, p in found.items()}
    return index


def _evaluate(segment: Segment, filters: dict[str, Any], load_fields: FieldLoader) -> np.ndarray:
    predicate = compile_filters(filters)
    other_fields = referenced_fields(filters) - {"id", "meta"}
    equalities = _equalities(filters)
    if equalities:
        # Only the positions holding every required value can match: the predicate runs on those alone, so a
        # per-patient filter costs the patient's records, not the whole segment's.
        candidates: np.ndarray | None = None
        for key, values in equalities:
            index = _value_positions(segment, key)
            positions = np.unique(np.concatenate([index.get(v, np.zeros(0, dtype=np.int64)) for v in values]))
            candidates = positions if candidates is None else np.intersect1d(candidates, positions,
                                                                             assume_unique=True)
        assert candidates is not None
        mask = np.zeros(segment.size, dtype=bool)
        if len(candidates):
            picked = candidates.tolist()
            extras = load_fields(segment.seqs[candidates].tolist(), other_fields) if other_fields else None
            mask[candidates] = np.fromiter(
                (predicate(StoredRecord(id=segment.ids[i], meta=segment.metas[i], extra=extras[j] if extras else {}))
                 for j, i in enumerate(picked)), dtype=bool, count=len(picked))
        return mask
    extras = load_fields(segment.seqs.tolist(), other_fields) if other_fields else None
    records = (
        StoredRecord(id=doc_id, meta=meta, extra=extras[i] if extras else {})
        for i, (doc_id, meta) in enumerate(zip(segment.ids, segment.metas, strict=True))
    )
    return np.fromiter((predicate(r) for r in records), dtype=bool, count=segment.size)


def _build_hnsw(matrix: np.ndarray) -> Any:
    import hnswlib

    size, dim = matrix.shape
    index = hnswlib.Index(space="ip", dim=dim)
    index.init_index(max_elements=size, M=ANN_M, ef_construction=ANN_EF_CONSTRUCTION, random_seed=100)
    index.add_items(matrix, np.arange(size))
    return index


def _build_in_background(block: DenseBlock) -> None:
    # The matrix is immutable; queries read `block.ann` only once the finished graph is assigned.
    block.ann = _build_hnsw(block.matrix)


def _top(seqs: np.ndarray, scores: np.ndarray, top_k: int) -> list[tuple[int, float]]:
    if len(scores) > top_k:
        best = np.argpartition(scores, -top_k)[-top_k:]
        seqs, scores = seqs[best], scores[best]
    return [(int(s), float(v)) for s, v in zip(seqs, scores, strict=True)]
