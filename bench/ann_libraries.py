"""Which HNSW library for the embedded store: hnswlib, usearch and faiss-cpu on the same clustered unit vectors
(harder than real embeddings), same graph degree (M=16) and construction beam (100): build time with 2 threads,
one-query p50 with 1 thread and recall@10 against exact search, for two query beams. Prints figures only.

    nice -n 10 python bench/ann_libraries.py --n 50000
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    n, d, nq, k = args.n, args.dim, args.queries, 10
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((500, d)).astype(np.float32)
    x = centers[rng.integers(0, 500, n)] + 0.7 * rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.integers(0, n, nq)] + 0.3 * rng.standard_normal((nq, d)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :k]

    def measure(search) -> tuple[float, float]:
        times, found = [], []
        for vector in q:
            started = time.perf_counter()
            found.append(search(vector))
            times.append(time.perf_counter() - started)
        recall = np.mean([len(set(f[:k]) & set(e)) / k for f, e in zip(found, exact, strict=True)])
        return 1000 * float(np.median(times)), float(recall)

    ms, _ = measure(lambda v: np.argpartition(-(x @ v), k)[:k])
    print(f"{n} x {d} clustered unit vectors, {nq} queries; exact p50 {ms:.2f} ms")
    print(f"{'library':<10} {'build s':>8} {'ef':>4} {'p50 ms':>7} {'recall@10':>9}")

    import hnswlib

    started = time.perf_counter()
    h = hnswlib.Index("ip", d)
    h.init_index(n, M=16, ef_construction=100)
    h.add_items(x, np.arange(n), num_threads=2)
    built = time.perf_counter() - started
    for ef in (64, 128):
        h.set_ef(ef)
        ms, r = measure(lambda v: h.knn_query(v, k=k, num_threads=1)[0][0])
        print(f"{'hnswlib':<10} {built:8.1f} {ef:>4} {ms:7.2f} {r:9.4f}")

    from usearch.index import Index

    started = time.perf_counter()
    u = Index(ndim=d, metric="ip", dtype="f32", connectivity=16, expansion_add=100)
    u.add(np.arange(n), x, threads=2)
    built = time.perf_counter() - started
    for ef in (64, 128):
        u.expansion_search = ef
        ms, r = measure(lambda v: u.search(v, k, threads=1).keys)
        print(f"{'usearch':<10} {built:8.1f} {ef:>4} {ms:7.2f} {r:9.4f}")

    import faiss

    faiss.omp_set_num_threads(2)
    started = time.perf_counter()
    f = faiss.IndexHNSWFlat(d, 16, faiss.METRIC_INNER_PRODUCT)
    f.hnsw.efConstruction = 100
    f.add(x)
    built = time.perf_counter() - started
    faiss.omp_set_num_threads(1)
    for ef in (64, 128):
        f.hnsw.efSearch = ef
        ms, r = measure(lambda v: f.search(v[None, :], k)[1][0])
        print(f"{'faiss-cpu':<10} {built:8.1f} {ef:>4} {ms:7.2f} {r:9.4f}")


if __name__ == "__main__":
    main()
