"""Index snapshots of the embedded store: immutable, memory-mapped generations shared by every process.

Layout, beside the SQLite file `<file>`:

    <file>.index/
        manifest.json      {"generation": "gen-00000007", "epoch": 0, "max_seq": 1000000, "max_log": 1234, ...}
        lock               file lock: one snapshot writer at a time, across processes
        gen-00000007/      one generation: .npy arrays (np.load(mmap_mode="r")), blobs, meta.json, HNSW graphs

A generation holds every document alive at its `max_seq` / deletion-log position `max_log`, as one segment:
sequence numbers, postings per term (CSC: indptr, int32 rows, float32 tf and BM25 weights computed with the
generation's own average length), document lengths, ids and metas as UTF-8 blobs with offsets (decoded one at a
time, on access), a per-meta-key index of text values (sorted values -> sorted positions, for the `==`/`in`
fast path), the sorted vocabulary (binary-searched, never loaded into a dict), float32 embedding matrices per
dimension and, for blocks large enough for approximate search, a usearch HNSW graph keyed by sequence number
(`Index.restore(view=True)` maps it). Everything is mapped when a generation is opened, so files unlinked later
stay readable by that process; only pages touched are read, and the page cache shares them between processes.

A process opening the store maps the manifest's generation (when its epoch is the store's: `delete_all_documents`
starts a new epoch and makes older snapshots void), then catches up from SQLite only above `max_seq` and after
`max_log`: the usual in-memory segments and a private alive mask hold the difference.

Writing is crash-safe: a generation is written into a temporary directory, fsynced and renamed, then the
manifest is replaced atomically (temp file, fsync, os.replace, directory fsync). A crash at any step leaves the
previous manifest naming a complete generation (or none): SQLite stays the source of truth, nothing is lost, and
the leftovers are removed by the next writer. Generations the manifest no longer names are removed after
`GRACE_SECONDS`; a process that read the manifest just before retries with the new one.

Usage:
    written = write_snapshot(directory, state)  # state: SnapshotState captured from a SearchIndex
    loaded = load_snapshot(directory, epoch=0, k1=1.5, b=0.75, similarity="cosine")
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from docqa.stores.search_index import (
    DenseBlock,
    Segment,
    alive_postings,
    bm25_weights,
    build_hnsw,
    column_maxima,
    postings,
)

logger = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = "lock"
GRACE_SECONDS = 60.0
_GEN_PREFIX = "gen-"
_TMP_PREFIX = ".tmp-"
# Rebuild a generation's HNSW graph instead of updating it when this share of its keys was removed.
REBUILD_REMOVED_FRACTION = 0.2


def snapshot_dir(store_path: str) -> Path:
    return Path(f"{store_path}.index")


def _after_step(step: str) -> None:
    """Called after each write step; tests make it fail or kill the process to simulate a crash there."""


# ---- reading ---------------------------------------------------------------------------------------------------


class StringTable(Sequence[str]):
    """Strings stored as one UTF-8 blob plus int64 offsets; `find` binary-searches a sorted table."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        self._blob = memoryview(np.ascontiguousarray(blob)).cast("B") if len(blob) else memoryview(b"")
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def raw(self, index: int) -> bytes:
        return bytes(self._blob[int(self._offsets[index]) : int(self._offsets[index + 1])])

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        return self.raw(index).decode()

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def find(self, text: str, lo: int = 0, hi: int | None = None) -> int | None:
        """Index of `text` in the sorted range [lo, hi), or None (UTF-8 byte order is code point order)."""
        wanted = text.encode()
        end = len(self) if hi is None else hi
        hi = end
        while lo < hi:
            mid = (lo + hi) // 2
            if self.raw(mid) < wanted:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < end and self.raw(lo) == wanted else None


class JsonList(Sequence[Any]):
    """A StringTable of JSON documents, each decoded when read."""

    def __init__(self, table: StringTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return json.loads(self.table.raw(index if index >= 0 else index + len(self)))

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(len(self)))


class ValuePositions(Mapping[str, np.ndarray]):
    """One meta key's text values -> ascending positions holding them, read from a generation's value index."""

    def __init__(self, values: StringTable, lo: int, hi: int, starts: np.ndarray, positions: np.ndarray) -> None:
        self._values, self._lo, self._hi, self._starts, self._positions = values, lo, hi, starts, positions

    def __getitem__(self, value: str) -> np.ndarray:
        found = self._values.find(value, self._lo, self._hi) if isinstance(value, str) else None
        if found is None:
            raise KeyError(value)
        return np.asarray(self._positions[int(self._starts[found]) : int(self._starts[found + 1])], dtype=np.int64)

    def __iter__(self) -> Iterator[str]:
        return (self._values[i] for i in range(self._lo, self._hi))

    def __len__(self) -> int:
        return self._hi - self._lo


@dataclass
class LoadedSnapshot:
    generation: str
    epoch: int
    max_seq: int
    max_log: int
    segment: Segment
    terms: StringTable


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return None


def _map(path: Path) -> np.ndarray:
    try:
        # A plain ndarray view of the mapping: np.memmap's Python-level indexing costs microseconds per access.
        return np.load(path, mmap_mode="r").view(np.ndarray)
    except ValueError:  # an empty array cannot be memory-mapped
        return np.load(path)


def _map_blob(path: Path) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)


def _table(gen: Path, name: str) -> StringTable:
    return StringTable(_map_blob(gen / f"{name}.bin"), _map(gen / f"{name}_offsets.npy"))


def load_snapshot(directory: Path, *, epoch: int, k1: float, b: float, similarity: str) -> LoadedSnapshot | None:
    """Map the manifest's generation, or None when there is none for this epoch and these BM25/similarity
    settings (or it cannot be read: the caller then indexes from SQLite)."""
    for _attempt in range(3):
        manifest = read_manifest(directory)
        if manifest is None or manifest.get("epoch") != epoch or manifest.get("format") != FORMAT:
            return None
        gen = directory / str(manifest["generation"])
        try:
            info = json.loads((gen / "meta.json").read_text())
            if (info["k1"], info["b"], info["similarity"]) != (k1, b, similarity):
                logger.info("index snapshot %s was written with other BM25/similarity settings: not used", gen)
                return None
            return _load_generation(gen, manifest, info)
        except FileNotFoundError:
            continue  # replaced and removed meanwhile: read the new manifest
        except Exception:  # a damaged generation must never make the store unusable
            logger.warning("index snapshot %s cannot be read: indexing from the database", gen, exc_info=True)
            return None
    return None


def _load_generation(gen: Path, manifest: dict[str, Any], info: dict[str, Any]) -> LoadedSnapshot:
    from usearch.index import Index

    seqs = _map(gen / "seqs.npy")
    n = int(info["rows"])
    if len(seqs) != n:
        raise ValueError(f"{gen}: {len(seqs)} sequence numbers for {n} rows")
    dense: dict[int, DenseBlock] = {}
    for dim in info["dims"]:
        block = DenseBlock(positions=_map(gen / f"dense-{dim}-positions.npy"), matrix=_map(gen / f"dense-{dim}.npy"))
        graph = gen / f"dense-{dim}.usearch"
        if graph.exists():
            block.ann = Index.restore(str(graph), view=True)
            if block.ann is None or len(block.ann) != len(block.positions):
                raise ValueError(f"{graph} does not hold the block's {len(block.positions)} vectors")
            block.ann_by_seq = True
        dense[int(dim)] = block
    value_keys: dict[str, list[int]] = json.loads((gen / "value_keys.json").read_text())
    values = _table(gen, "values")
    starts, positions = _map(gen / "value_starts.npy"), _map(gen / "value_positions.npy")

    def value_source(key: str) -> Mapping[str, np.ndarray]:
        lo, hi = value_keys.get(key, (0, 0))
        return ValuePositions(values, lo, hi, starts, positions)

    segment = Segment(
        seqs=seqs,
        ids=_table(gen, "ids"),
        metas=JsonList(_table(gen, "metas")),
        alive=np.ones(n, dtype=bool),
        indptr=_map(gen / "indptr.npy"),
        indices=_map(gen / "indices.npy"),
        tf=_map(gen / "tf.npy"),
        doc_len=_map(gen / "doc_len.npy"),
        weights=_map(gen / "weights.npy"),
        max_weights=(_map(gen / "max_weights.npy") if (gen / "max_weights.npy").exists()
                     else column_maxima(_map(gen / "weights.npy"), _map(gen / "indptr.npy"))),
        dense=dense,
        term_ids=None,
        frozen=True,
        value_source=value_source,
    )
    return LoadedSnapshot(
        generation=gen.name,
        epoch=int(manifest["epoch"]),
        max_seq=int(manifest["max_seq"]),
        max_log=int(manifest["max_log"]),
        segment=segment,
        terms=_table(gen, "terms"),
    )


# ---- writing ---------------------------------------------------------------------------------------------------


@dataclass
class SnapshotState:
    """What a snapshot is written from, captured from a SearchIndex at one consistent point."""

    segments: list[Segment]
    alive: list[np.ndarray]  # copies: the index keeps deleting while the snapshot is written
    term: Callable[[int], str]  # term id -> term, for ids below vocab_size
    vocab_size: int
    k1: float
    b: float
    similarity: str
    epoch: int
    max_seq: int
    max_log: int
    ann_min_chunks: int | None
    base_generation: Path | None  # the generation the frozen segment came from (its graphs are updated)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(array))
        f.flush()
        os.fsync(f.fileno())


def _save_strings(gen: Path, name: str, chunks: Iterator[bytes], count: int) -> None:
    offsets = np.zeros(count + 1, dtype=np.int64)
    with open(gen / f"{name}.bin", "wb") as f:
        position = 0
        for i, chunk in enumerate(chunks):
            f.write(chunk)
            position += len(chunk)
            offsets[i + 1] = position
        f.flush()
        os.fsync(f.fileno())
    _save(gen / f"{name}_offsets.npy", offsets)


def _raw_strings(segment: Segment, positions: np.ndarray, kind: str) -> Iterator[bytes]:
    items = segment.ids if kind == "ids" else segment.metas
    if isinstance(items, JsonList):
        items = items.table
    if isinstance(items, StringTable):
        yield from (items.raw(int(p)) for p in positions)
    elif kind == "ids":
        yield from (items[int(p)].encode() for p in positions)
    else:
        yield from (json.dumps(items[int(p)]).encode() for p in positions)


def _value_index(metas: Iterator[dict[str, Any]]) -> dict[str, dict[str, list[int]]]:
    found: dict[str, dict[str, list[int]]] = {}
    for position, meta in enumerate(metas):
        for key, value in meta.items():
            # A list matches when any item does (see `compile_filters`).
            items = (value,) if isinstance(value, str) else set(value) if isinstance(value, list) else ()
            for item in items:
                if isinstance(item, str):
                    found.setdefault(key, {}).setdefault(item, []).append(position)
    return found


def _save_value_index(gen: Path, index: dict[str, dict[str, list[int]]]) -> None:
    keys: dict[str, list[int]] = {}
    strings: list[bytes] = []
    starts = [0]
    position_parts: list[np.ndarray] = []
    for key in sorted(index):
        values = sorted(index[key], key=str.encode)
        keys[key] = [len(strings), len(strings) + len(values)]
        for value in values:
            strings.append(value.encode())
            positions = np.asarray(index[key][value], dtype=np.int32)  # ascending, each position once
            position_parts.append(positions)
            starts.append(starts[-1] + len(positions))
    (gen / "value_keys.json").write_text(json.dumps(keys))
    _save_strings(gen, "values", iter(strings), len(strings))
    _save(gen / "value_starts.npy", np.asarray(starts, dtype=np.int64))
    _save(gen / "value_positions.npy", np.concatenate(position_parts) if position_parts else np.zeros(0, np.int32))


def _dense_parts(state: SnapshotState) -> dict[int, list[tuple[np.ndarray, np.ndarray, Segment, DenseBlock]]]:
    """dim -> [(new row numbers, block rows, segment, block)] over the alive rows."""
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, Segment, DenseBlock]]] = {}
    offset = 0
    for segment, alive in zip(state.segments, state.alive, strict=True):
        renumber = np.cumsum(alive, dtype=np.int64) - 1 + offset
        for dim, block in segment.dense.items():
            keep = np.flatnonzero(alive[block.positions])
            parts.setdefault(dim, []).append((renumber[block.positions[keep]], keep, segment, block))
        offset += int(np.count_nonzero(alive))
    return parts


def _write_graph(
    gen: Path, dim: int, matrix: np.ndarray, seqs: np.ndarray, state: SnapshotState, threads: int
) -> None:
    """The block's HNSW graph keyed by sequence number: the previous generation's, updated, or a new one."""
    from usearch.index import Index

    graph = None
    previous = state.base_generation / f"dense-{dim}.usearch" if state.base_generation else None
    base = state.segments[0] if state.segments and state.segments[0].frozen else None
    if previous is not None and previous.exists() and base is not None and dim in base.dense:
        graph = Index.restore(str(previous), view=False)
        old_keys = np.asarray(base.seqs)[np.asarray(base.dense[dim].positions)]
        removed = np.setdiff1d(old_keys, seqs, assume_unique=True)
        if graph is None or len(removed) > REBUILD_REMOVED_FRACTION * max(len(old_keys), 1):
            graph = None
        else:
            if len(removed):
                graph.remove(removed)
            new = np.flatnonzero(seqs > (old_keys.max() if len(old_keys) else -1))
            if len(new):
                graph.add(seqs[new], np.ascontiguousarray(matrix[new]), threads=threads)
    if graph is None:
        graph = build_hnsw(matrix, keys=seqs, threads=threads)
    graph.save(str(gen / f"dense-{dim}.usearch"))
    _fsync_path(gen / f"dense-{dim}.usearch")


def write_snapshot(directory: Path, state: SnapshotState, threads: int = 2) -> str:
    """Write a new generation from `state` and make the manifest name it. Call under the snapshot lock.

    :returns: the new generation's name.
    """
    directory.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(directory)
    number = 1 + max((int(p.name[len(_GEN_PREFIX) :]) for p in directory.glob(f"{_GEN_PREFIX}*")), default=0)
    name = f"{_GEN_PREFIX}{number:08d}"
    gen = directory / f"{_TMP_PREFIX}{name}"
    gen.mkdir()
    segments, alive = state.segments, state.alive

    positions = [np.flatnonzero(a) for a in alive]
    seqs = np.concatenate([np.asarray(s.seqs)[p] for s, p in zip(segments, positions, strict=True)] or [np.zeros(0)])
    seqs = seqs.astype(np.int64)
    if len(seqs) > 1 and not (np.diff(seqs) > 0).all():
        raise RuntimeError("segments must be given in sequence order")
    n = len(seqs)
    _save(gen / "seqs.npy", seqs)
    _after_step("seqs")

    rows, terms, tf = alive_postings(segments, alive)
    used = np.unique(terms)
    words = [state.term(int(t)).encode() for t in used]
    order = sorted(range(len(words)), key=words.__getitem__)
    remap = np.full(int(used.max()) + 1 if len(used) else 0, -1, dtype=np.int64)
    remap[used[np.asarray(order, dtype=np.int64)]] = np.arange(len(order), dtype=np.int64)
    _save_strings(gen, "terms", (words[i] for i in order), len(order))
    columns, indptr, indices, tf = postings(rows, remap[terms], tf, n)
    del rows, terms, remap
    full_indptr = np.zeros(len(order) + 1, dtype=np.int64)
    # Every kept term has postings, so the columns are 0..V-1; the general form guards against surprises.
    full_indptr[columns + 1] = np.diff(indptr)
    full_indptr = np.cumsum(full_indptr)
    doc_len = np.concatenate(
        [np.asarray(s.doc_len)[p] for s, p in zip(segments, positions, strict=True)] or [np.zeros(0)]
    ).astype(np.float32)
    avgdl = float(doc_len.astype(np.float64).sum()) / n if n else 1.0
    _save(gen / "indptr.npy", full_indptr)
    _save(gen / "indices.npy", indices)
    _save(gen / "tf.npy", tf)
    _save(gen / "doc_len.npy", doc_len)
    weights = bm25_weights(tf, indices, doc_len, state.k1, state.b, avgdl)
    _save(gen / "weights.npy", weights)
    _save(gen / "max_weights.npy", column_maxima(weights, full_indptr))
    del weights
    del indices, tf
    _after_step("postings")

    def strings(kind: str) -> Iterator[bytes]:
        for segment, picked in zip(segments, positions, strict=True):
            yield from _raw_strings(segment, picked, kind)

    _save_strings(gen, "ids", strings("ids"), n)
    _save_strings(gen, "metas", strings("metas"), n)

    def metas() -> Iterator[dict[str, Any]]:
        for segment, picked in zip(segments, positions, strict=True):
            yield from (segment.metas[int(p)] for p in picked)

    _save_value_index(gen, _value_index(metas()))
    _after_step("metas")

    dims = []
    for dim, parts in sorted(_dense_parts(state).items()):
        count = sum(len(new_rows) for new_rows, _, _, _ in parts)
        if not count:
            continue
        dims.append(dim)
        matrix = np.lib.format.open_memmap(gen / f"dense-{dim}.npy", mode="w+", dtype=np.float32, shape=(count, dim))
        filled = 0
        for _, block_rows, _, block in parts:
            for start in range(0, len(block_rows), 65536):
                chunk = block_rows[start : start + 65536]
                matrix[filled : filled + len(chunk)] = block.matrix[chunk]
                filled += len(chunk)
        matrix.flush()
        _fsync_path(gen / f"dense-{dim}.npy")
        new_positions = np.concatenate([new_rows for new_rows, _, _, _ in parts])
        _save(gen / f"dense-{dim}-positions.npy", new_positions)
        if state.ann_min_chunks is not None and count >= max(state.ann_min_chunks, 1):
            _write_graph(gen, dim, matrix, seqs[new_positions], state, threads)
        del matrix
        _after_step(f"dense-{dim}")

    info = {"format": FORMAT, "rows": n, "terms": len(order), "dims": dims, "k1": state.k1, "b": state.b,
            "similarity": state.similarity, "avgdl": avgdl, "written_at": time.time()}
    (gen / "meta.json").write_text(json.dumps(info))
    _fsync_path(gen / "meta.json")
    _fsync_path(gen)
    os.rename(gen, directory / name)
    _fsync_path(directory)
    _after_step("generation")

    manifest = {"format": FORMAT, "generation": name, "epoch": state.epoch, "max_seq": state.max_seq,
                "max_log": state.max_log, "rows": n}
    temp = directory / f"{_TMP_PREFIX}{MANIFEST}"
    with open(temp, "w") as f:
        f.write(json.dumps(manifest))
        f.flush()
        os.fsync(f.fileno())
    _after_step("manifest-temp")
    os.replace(temp, directory / MANIFEST)
    _fsync_path(directory)
    _after_step("manifest")
    remove_old_generations(directory)
    return name


def _remove_leftovers(directory: Path) -> None:
    """Temporary files of writers that died (only the lock holder writes, so none is in progress)."""
    for path in directory.glob(f"{_TMP_PREFIX}*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def remove_old_generations(directory: Path, grace_seconds: float = GRACE_SECONDS) -> None:
    """Remove generations the manifest does not name, once unused for `grace_seconds` (processes that mapped
    them keep reading their unlinked files)."""
    manifest = read_manifest(directory)
    current = manifest.get("generation") if manifest else None
    now = time.time()
    for path in directory.glob(f"{_GEN_PREFIX}*"):
        if path.name != current and now - path.stat().st_mtime >= grace_seconds:
            shutil.rmtree(path, ignore_errors=True)
