"""The search side of the embedded store: immutable segments plus tombstones, over SQLite's rows.

Each segment holds the documents of one catch-up batch: postings per term (rows, term frequencies and
precomputed BM25 term weights, CSC-like: `indptr` slices `indices`/`tf`/`weights` by column), float32
embedding blocks (one per dimension), the metadata used by filters, and an alive mask. Deleting or
overwriting a document only flips its alive bit; in-memory segments are merged when there are many of them or
many dead rows.

A process that opens a store with an index snapshot (`docqa.stores.snapshot`) starts from one *frozen*
segment whose arrays are memory-mapped from the snapshot files (pages shared by every process), with a private
alive mask; its columns are the snapshot's sorted vocabulary, which `_Vocabulary` consults before giving a
new term the next id. Only rows written after the snapshot become in-memory segments (the delta). A frozen
segment is never merged or reweighted in place: the next snapshot replaces it.

BM25 accumulates the query terms' postings into a per-segment scratch array and reads back only the touched
rows (no pass over the whole segment), so a query costs its postings, not the corpus size.

Dense search is exact (one matrix-vector product per block) in blocks smaller than `ann_min_chunks` rows and
approximate in larger ones: an HNSW graph (usearch, inner product). A snapshot carries the graph of its large
blocks (keys are sequence numbers), memory-mapped like the rest; other blocks build theirs on the first dense
query, and blocks above `ANN_SYNC_BUILD_MAX` rows build it in a background thread, searched exactly until it is
ready. The graph only proposes candidates: they are over-fetched, filtered exactly by the same masks as exact
search (tenant, access, collection, dates, tombstones) and re-scored exactly, so scores equal exact search's.
A filter keeping under `ANN_MIN_FRACTION` of the block, or an over-fetch that leaves fewer than `top_k`
matching candidates, falls back to exact search over the matching rows.

Statistics follow Lucene: document frequencies and the average length count tombstoned rows until the next
merge (or snapshot), and a segment's length normalisation uses the average length known when it was weighted
(a frozen segment: when its snapshot was written).

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

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
# The graph holds its own copy of the vectors; int8 makes it a quarter of the float32 size and builds about twice
# as fast, and candidates are rescored exactly against the float32 matrix, so only the candidate set is approximate.
ANN_DTYPE = "i8"
ANN_MIN_FRACTION = 0.05
ANN_SYNC_BUILD_MAX = 20_000
ANN_BUILD_THREADS = 2

_EMPTY = np.zeros(0, dtype=np.int64)


class TermTable(Protocol):
    """A snapshot's sorted vocabulary: term id <-> term."""

    def __len__(self) -> int: ...

    def __getitem__(self, term_id: int) -> str: ...

    def find(self, term: str) -> int | None: ...


@dataclass
class IndexedRow:
    seq: int
    id: str
    content: str | None
    meta: dict[str, Any]
    embedding: np.ndarray | None


@dataclass
class DenseBlock:
    positions: np.ndarray  # rows of the segment that have an embedding of this dimension (ascending)
    matrix: np.ndarray  # float32 (len(positions), dim), unit rows when similarity is cosine
    ann: Any = None  # usearch index over `matrix` rows, built on first use when the block is large enough
    ann_builder: threading.Thread | None = None  # background build of `ann` for large blocks
    ann_by_seq: bool = False  # graph keys are sequence numbers (snapshot graphs), else block rows


@dataclass
class Segment:
    seqs: np.ndarray  # ascending
    ids: Sequence[str]
    metas: Sequence[dict[str, Any]]
    alive: np.ndarray
    indptr: np.ndarray  # column c's postings are indices/tf/weights[indptr[c]:indptr[c + 1]]
    indices: np.ndarray  # int32 rows, ascending within a column
    tf: np.ndarray  # float32 term frequencies
    doc_len: np.ndarray
    weights: np.ndarray  # float32 BM25 term weights (without idf)
    dense: dict[int, DenseBlock]
    # Global term id of each column (ascending); None when column c is term c (frozen segments).
    term_ids: np.ndarray | None = None
    frozen: bool = False
    dead: int = 0
    filter_masks: OrderedDict[str, np.ndarray] = field(default_factory=OrderedDict)
    # meta key -> text value -> positions holding it (a segment's metas never change), for `==` fast paths.
    value_index: dict[str, Mapping[str, np.ndarray]] = field(default_factory=dict)
    # Frozen segments read a key's value index from their snapshot instead of decoding every meta.
    value_source: Callable[[str], Mapping[str, np.ndarray]] | None = None
    scratch: np.ndarray | None = None  # BM25 accumulator, zero between queries
    max_weights: np.ndarray | None = None  # per column: the largest weight (BM25 upper bounds for pruning)

    @property
    def size(self) -> int:
        return len(self.seqs)

    def columns(self, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in `terms` that have postings here, their columns)."""
        if self.term_ids is None:
            inside = np.flatnonzero(terms < len(self.indptr) - 1)
            return inside, terms[inside]
        cols = np.searchsorted(self.term_ids, terms)
        found = np.flatnonzero((cols < len(self.term_ids)) & (self.term_ids[np.minimum(cols, len(self.term_ids) - 1)]
                                                              == terms)) if len(self.term_ids) else _EMPTY
        return found, cols[found]

    def coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, global term id, tf) of every posting."""
        counts = np.diff(self.indptr)
        cols = np.arange(len(counts), dtype=np.int64) if self.term_ids is None else self.term_ids
        return np.asarray(self.indices), np.repeat(cols, counts), np.asarray(self.tf)


class SearchIndex:
    """BM25 and dense search over segments; not thread-safe (the store serialises access).

    :param base: a frozen (memory-mapped) segment from a snapshot, and `base_terms` its vocabulary.
    """

    def __init__(
        self,
        *,
        k1: float,
        b: float,
        similarity: str,
        ann_min_chunks: int | None = None,
        base: Segment | None = None,
        base_terms: TermTable | None = None,
    ) -> None:
        """:param ann_min_chunks: blocks of at least this many embeddings are searched through HNSW (None: never)."""
        self.k1 = k1
        self.b = b
        self.similarity = similarity
        self.ann_min_chunks = ann_min_chunks
        # Looking up an unseen term assigns it the next id; queries use `lookup`, which never adds terms.
        self.vocab = _Vocabulary(base_terms)
        self._stop = np.zeros(0, dtype=bool)  # stop-word flags of the terms added after the base vocabulary
        self.segments: list[Segment] = []
        self.base = base
        self._df = np.zeros(0, dtype=np.int64)  # document frequencies from in-memory segments
        self._indexed_docs = 0
        self._indexed_len = 0.0
        if base is not None:
            self.segments.append(base)
            self._indexed_docs = base.size
            self._indexed_len = float(np.asarray(base.doc_len, dtype=np.float64).sum())

    @property
    def live_count(self) -> int:
        return int(sum(np.count_nonzero(s.alive) for s in self.segments))

    @property
    def pending_changes(self) -> int:
        """Rows the next snapshot would fold in: in-memory rows plus rows deleted from the frozen segment."""
        return sum(s.dead if s.frozen else s.size for s in self.segments)

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
            if len(hits):
                hits = hits[segment.alive[hits]]
                segment.alive[hits] = False
                segment.dead += len(hits)
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
        doc_rows = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
        # Base (snapshot) terms are never stop words: the snapshot keeps only terms with postings.
        keep = np.ones(len(terms), dtype=bool)
        added = np.flatnonzero(terms >= self.vocab.base_size)
        keep[added] = ~self._stop_flags()[terms[added] - self.vocab.base_size]
        terms, doc_rows = terms[keep], doc_rows[keep]
        doc_len = np.bincount(doc_rows, minlength=len(rows)).astype(np.float32)
        columns, indptr, indices, tf = postings(doc_rows, terms, np.ones(len(terms), dtype=np.float32), len(rows))
        segment = Segment(
            seqs=np.asarray([r.seq for r in rows], dtype=np.int64),
            ids=[r.id for r in rows],
            metas=[r.meta for r in rows],
            alive=np.ones(len(rows), dtype=bool),
            indptr=indptr,
            indices=indices,
            tf=tf,
            doc_len=doc_len,
            weights=np.zeros(0, dtype=np.float32),
            dense=self._dense_blocks([r.embedding for r in rows]),
            term_ids=columns,
        )
        self._count_stats(segment, sign=1)
        self._reweight(segment)
        return segment

    def _stop_flags(self) -> np.ndarray:
        added = self.vocab.added
        if len(self._stop) < len(added):
            fresh = np.fromiter((t in STOP_WORDS for t in added[len(self._stop) :]), dtype=bool)
            self._stop = np.concatenate([self._stop, fresh])
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
                matrix = normalise_rows(matrix)
            blocks[dim] = DenseBlock(positions=np.asarray(positions, dtype=np.int64), matrix=matrix)
        return blocks

    def _count_stats(self, segment: Segment, sign: int) -> None:
        assert segment.term_ids is not None, "frozen segments keep their snapshot's statistics"
        if len(self._df) < self.vocab.size:
            grown = np.zeros(max(self.vocab.size, 2 * len(self._df)), dtype=np.int64)
            grown[: len(self._df)] = self._df
            self._df = grown
        self._df[segment.term_ids] += sign * np.diff(segment.indptr)
        self._indexed_docs += sign * segment.size
        self._indexed_len += sign * float(segment.doc_len.sum())

    def _reweight(self, segment: Segment) -> None:
        if segment.frozen:
            return
        avgdl = self._indexed_len / self._indexed_docs if self._indexed_docs else 1.0
        segment.weights = bm25_weights(segment.tf, segment.indices, segment.doc_len, self.k1, self.b, avgdl)
        segment.max_weights = column_maxima(segment.weights, segment.indptr)

    def _maybe_merge(self) -> None:
        # Frozen (snapshot) segments stay as they are: the next snapshot drops their dead rows.
        loose = [s for s in self.segments if not s.frozen]
        total = sum(s.size for s in loose)
        dead = sum(s.dead for s in loose)
        if total and dead / total > MAX_DEAD_FRACTION:
            self._merge(loose)
        elif len(loose) > MAX_SEGMENTS:
            # Merge the small segments; fold the largest in only when it would not dominate the result.
            ordered = sorted(loose, key=lambda s: s.size)
            small, largest = ordered[:-1], ordered[-1]
            self._merge(ordered if sum(s.size for s in small) >= largest.size else small)

    def _merge(self, chosen: list[Segment]) -> None:
        chosen = sorted(chosen, key=lambda s: int(s.seqs[0]) if s.size else 0)
        keep = [s for s in self.segments if all(s is not c for c in chosen)]
        for segment in chosen:
            self._count_stats(segment, sign=-1)
        alive_pos = [np.flatnonzero(s.alive) for s in chosen]
        rows, terms, tfs = alive_postings(chosen, [s.alive for s in chosen])
        n = sum(len(p) for p in alive_pos)
        columns, indptr, indices, tf = postings(rows, terms, tfs, n)
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
            alive=np.ones(n, dtype=bool),
            indptr=indptr,
            indices=indices,
            tf=tf,
            doc_len=np.concatenate([s.doc_len[p] for s, p in zip(chosen, alive_pos, strict=True)]),
            weights=np.zeros(0, dtype=np.float32),
            # Already-normalised rows stay unit rows, so re-normalising is harmless.
            dense=self._dense_blocks(embeddings),
            term_ids=columns,
        )
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

    def _document_frequencies(self, terms: np.ndarray) -> np.ndarray:
        df = np.zeros(len(terms), dtype=np.float64)
        inside = terms < len(self._df)
        df[inside] += self._df[terms[inside]]
        if self.base is not None:
            indptr = self.base.indptr
            based = terms < len(indptr) - 1
            df[based] += indptr[terms[based] + 1] - indptr[terms[based]]
        return df

    def bm25(
        self, query: str, *, top_k: int, filters: dict[str, Any] | None, load_fields: FieldLoader
    ) -> list[tuple[int, float]]:
        """Top documents by BM25 (OR over the query terms) as (seq, score), best first."""
        known = sorted({i for t in tokenize(query) if (i := self.vocab.lookup(t)) is not None})
        if not known or not self._indexed_docs:
            return []
        terms = np.asarray(known, dtype=np.int64)
        df = self._document_frequencies(terms)
        idf = np.log1p((self._indexed_docs - df + 0.5) / (df + 0.5)).astype(np.float32)
        candidates: list[tuple[int, float]] = []
        for segment in self.segments:
            found, cols = segment.columns(terms)
            spans = [
                (int(segment.indptr[c]), int(segment.indptr[c + 1]), idf[f], c)
                for f, c in zip(found.tolist(), cols.tolist(), strict=True)
            ]
            spans = [span for span in spans if span[1] > span[0]]
            if spans:
                mask = self._mask(segment, filters, load_fields) if filters or segment.dead else None
                candidates.extend(_bm25_segment(segment, spans, top_k, mask))
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
            mask = self._mask(segment, filters, load_fields)
            usable = mask if len(block.positions) == segment.size else mask[block.positions]
            if not usable.any():
                continue
            rows = self._ann_rows(segment, block, query, usable, top_k)
            if rows is None:
                picked = np.flatnonzero(usable)
                # A selective filter reads only its rows; otherwise one product over the block is cheaper.
                if 4 * len(picked) < len(block.positions):
                    scores = block.matrix[picked] @ query
                else:
                    scores = (block.matrix @ query)[picked]
                candidates.extend(_top(segment.seqs[block.positions[picked]], scores, top_k))
            else:
                rows = np.sort(rows)  # ascending reads of a memory-mapped matrix
                scores = block.matrix[rows] @ query
                candidates.extend(_top(segment.seqs[block.positions[rows]], scores, top_k))
        return sorted(candidates, key=lambda c: -c[1])[:top_k]

    def _ann_rows(
        self, segment: Segment, block: DenseBlock, query: np.ndarray, usable: np.ndarray, top_k: int
    ) -> np.ndarray | None:
        """Block rows holding the approximate top `top_k` among `usable` rows, or None to search exactly."""
        size = len(block.positions)
        if self.ann_min_chunks is None or size < max(self.ann_min_chunks, 1):
            return None
        n_usable = int(np.count_nonzero(usable))
        fraction = n_usable / size
        if fraction < ANN_MIN_FRACTION:
            return None
        fetch = min(size, max(top_k, int(np.ceil(ANN_OVERFETCH * top_k / fraction))))
        index = self._ann_index(block)
        if index is None:  # still being built
            return None
        index.expansion_search = max(ANN_EF_SEARCH, fetch)
        keys = np.asarray(index.search(query, fetch, threads=1).keys, dtype=np.int64)
        rows = rows_of_seqs(segment, block, keys) if block.ann_by_seq else keys
        rows = rows[usable[rows]]
        if len(rows) < min(top_k, n_usable):
            return None
        return rows

    def _ann_index(self, block: DenseBlock) -> Any:
        """The block's HNSW graph; None while a large block's graph is built in the background."""
        if block.ann is None:
            if len(block.positions) <= ANN_SYNC_BUILD_MAX:
                block.ann = build_hnsw(block.matrix, threads=1)
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
    """term -> id; a missing term takes its base (snapshot) id, or else the next id (C-speed lookups for known
    terms while indexing). Ids below `base_size` are the base vocabulary's, in its sorted order."""

    def __init__(self, base: TermTable | None = None) -> None:
        super().__init__()
        self.base = base
        self.base_size = len(base) if base is not None else 0
        self.size = self.base_size
        self.added: list[str] = []  # the terms of ids base_size, base_size + 1, ...

    def __missing__(self, term: str) -> int:
        if self.base is not None:
            found = self.base.find(term)
            if found is not None:
                self[term] = found
                return found
        term_id = self[term] = self.size
        self.size += 1
        self.added.append(term)
        return term_id

    def lookup(self, term: str) -> int | None:
        """The term's id, without adding it."""
        found = self.get(term)
        if found is None and self.base is not None:
            found = self.base.find(term)
            if found is not None:
                self[term] = found  # base ids never change; unknown terms are not remembered
        return found

    def term(self, term_id: int) -> str:
        if term_id < self.base_size:
            assert self.base is not None
            return self.base[term_id]
        return self.added[term_id - self.base_size]


def postings(
    rows: np.ndarray, terms: np.ndarray, values: np.ndarray, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Column-major postings from (row, term, value) triples, summing repeated pairs.

    :returns: (term id of each column, indptr, int32 rows, float32 values).
    """
    key = np.asarray(terms, dtype=np.int64) * max(n_rows, 1) + np.asarray(rows, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    key = key[order]
    values = np.asarray(values, dtype=np.float32)[order]
    del order
    if len(key) > 1:
        first = np.empty(len(key), dtype=bool)
        first[0] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        if not first.all():
            starts = np.flatnonzero(first)
            values = np.add.reduceat(values, starts)
            key = key[starts]
    column_terms = key // max(n_rows, 1)
    columns, starts = np.unique(column_terms, return_index=True)
    indptr = np.append(starts, len(key)).astype(np.int64)
    return columns.astype(np.int64), indptr, (key % max(n_rows, 1)).astype(np.int32), values


def alive_postings(segments: Sequence[Segment], alive: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """(row, term, tf) of the alive rows of `segments`, rows renumbered consecutively across them."""
    rows_parts, term_parts, tf_parts = [], [], []
    offset = 0
    for segment, mask in zip(segments, alive, strict=True):
        rows, terms, tf = segment.coo()
        keep = mask[rows]
        renumber = np.cumsum(mask, dtype=np.int64) - 1 + offset
        rows_parts.append(renumber[rows[keep]])
        term_parts.append(terms[keep])
        tf_parts.append(tf[keep])
        offset += int(np.count_nonzero(mask))
    if not rows_parts:
        return _EMPTY, _EMPTY, np.zeros(0, dtype=np.float32)
    return np.concatenate(rows_parts), np.concatenate(term_parts), np.concatenate(tf_parts)


def bm25_weights(
    tf: np.ndarray, rows: np.ndarray, doc_len: np.ndarray, k1: float, b: float, avgdl: float
) -> np.ndarray:
    norm = k1 * (1.0 - b + b * np.asarray(doc_len) / max(avgdl, 1e-9))
    tf = np.asarray(tf)
    return (tf * (k1 + 1.0) / (tf + norm[rows])).astype(np.float32)


def column_maxima(values: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """The largest value of each column (meaningless for empty columns, which queries skip)."""
    if not len(values):
        return np.zeros(max(len(indptr) - 1, 0), dtype=np.float32)
    starts = np.minimum(np.asarray(indptr[:-1], dtype=np.int64), len(values) - 1)
    return np.maximum.reduceat(values, starts).astype(np.float32)


def _bm25_segment(
    segment: Segment, spans: list[tuple[int, int, Any, int]], top_k: int, mask: np.ndarray | None
) -> list[tuple[int, float]]:
    """Top `top_k` (seq, score) of one segment for query terms given as (start, end, idf, column) spans.

    MaxScore pruning: terms are taken in decreasing order of their best possible contribution (idf x the
    column's largest weight), accumulating their postings. Once the remaining terms together cannot lift a
    row that has none of the terms taken so far above the current k-th best partial score, those rows are out:
    the remaining (frequent) terms are only looked up, by binary search in their sorted postings, for the
    candidates that can still make the top k. Scores are the same sums as without pruning (in another order).
    """
    assert segment.max_weights is not None
    if len(spans) == 1:
        start, end, term_idf, _ = spans[0]
        hits = np.asarray(segment.indices[start:end], dtype=np.int64)
        scores = (segment.weights[start:end] * term_idf).astype(np.float64)
        if mask is not None:
            keep = mask[hits]
            hits, scores = hits[keep], scores[keep]
        return _top(segment.seqs[hits], scores, top_k)
    bounds = [float(term_idf * segment.max_weights[column]) for _, _, term_idf, column in spans]
    order = sorted(range(len(spans)), key=lambda j: -bounds[j])
    spans = [spans[j] for j in order]
    rest = [*np.cumsum([bounds[j] for j in order][::-1])[::-1].tolist(), 0.0]  # bound of spans[i:]
    if segment.scratch is None:
        segment.scratch = np.zeros(segment.size, dtype=np.float64)
    scratch = segment.scratch
    fresh: list[np.ndarray] = []
    threshold = 0.0
    taken = 0
    while taken < len(spans):
        if taken and rest[taken] <= threshold:
            break
        start, end, term_idf, _ = spans[taken]
        rows = segment.indices[start:end]
        before = scratch[rows]
        scratch[rows] = before + segment.weights[start:end] * term_idf
        fresh.append(rows[before == 0.0])  # scores are positive: zero means not seen yet
        taken += 1
        if taken < len(spans):
            seen = np.concatenate(fresh)
            if mask is not None:
                seen = seen[mask[seen]]
            if len(seen) >= top_k:
                threshold = float(np.partition(scratch[seen], len(seen) - top_k)[len(seen) - top_k])
    seen = np.concatenate(fresh)
    hits = seen[mask[seen]] if mask is not None else seen
    scores = scratch[hits]
    scratch[seen] = 0.0
    if taken < len(spans):
        # Rows that cannot reach the k-th best partial score even with every remaining term are out.
        keep = scores + rest[taken] > threshold
        hits, scores = hits[keep], scores[keep]
        by_row = np.argsort(hits, kind="stable")
        hits, scores = hits[by_row].astype(np.int32), scores[by_row]
        for i in range(taken, len(spans)):
            start, end, term_idf, _ = spans[i]
            rows = segment.indices[start:end]
            at = np.minimum(np.searchsorted(rows, hits), len(rows) - 1)
            found = np.flatnonzero(rows[at] == hits)
            scores[found] += segment.weights[start:end][at[found]] * term_idf
            if len(hits) > top_k and i + 1 < len(spans):
                # Partial scores only grow: prune again with the tighter bound of the terms still left.
                threshold = max(threshold, float(np.partition(scores, len(scores) - top_k)[len(scores) - top_k]))
                keep = scores + rest[i + 1] > threshold
                hits, scores = hits[keep], scores[keep]
    return _top(segment.seqs[hits], scores, top_k)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32, copy=False)


def rows_of_seqs(segment: Segment, block: DenseBlock, seqs: np.ndarray) -> np.ndarray:
    """Block rows of the given sequence numbers (all present in the segment and the block)."""
    positions = np.searchsorted(segment.seqs, seqs)
    if len(block.positions) == segment.size:
        return positions
    return np.searchsorted(block.positions, positions)


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


def _only_equalities(filters: dict[str, Any]) -> bool:
    """Whether the filter is nothing but such equalities (under ANDs): then the value index is the answer."""
    if "field" not in filters and filters.get("operator") == "AND":
        conditions = filters.get("conditions")
        return (isinstance(conditions, list) and bool(conditions)
                and all(isinstance(c, dict) and _only_equalities(c) for c in conditions))
    return "field" in filters and bool(_equalities(filters))


def _value_positions(segment: Segment, key: str) -> Mapping[str, np.ndarray]:
    index = segment.value_index.get(key)
    if index is None:
        if segment.value_source is not None:
            index = segment.value_index[key] = segment.value_source(key)
            return index
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
        mask = np.ones(segment.size, dtype=bool)
        for key, values in equalities:
            index = _value_positions(segment, key)
            holding = np.zeros(segment.size, dtype=bool)
            for value in values:
                holding[index.get(value, _EMPTY)] = True
            mask &= holding
        if _only_equalities(filters):
            return mask
        candidates = np.flatnonzero(mask)
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


def build_hnsw(matrix: np.ndarray, keys: np.ndarray | None = None, threads: int = ANN_BUILD_THREADS) -> Any:
    """An inner-product HNSW graph over `matrix` rows, keyed by `keys` (default: row numbers)."""
    from usearch.index import Index

    size, dim = matrix.shape
    index = Index(ndim=dim, metric="ip", dtype=ANN_DTYPE, connectivity=ANN_M, expansion_add=ANN_EF_CONSTRUCTION)
    if size:
        index.add(np.arange(size) if keys is None else keys, np.ascontiguousarray(matrix), threads=threads)
    return index


def _build_in_background(block: DenseBlock) -> None:
    # The matrix is immutable; queries read `block.ann` only once the finished graph is assigned.
    block.ann = build_hnsw(block.matrix)


def _top(seqs: np.ndarray, scores: np.ndarray, top_k: int) -> list[tuple[int, float]]:
    if len(scores) > top_k:
        best = np.argpartition(scores, -top_k)[-top_k:]
        seqs, scores = seqs[best], scores[best]
    return [(int(s), float(v)) for s, v in zip(seqs, scores, strict=True)]
