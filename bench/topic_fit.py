"""Topic model fit time and memory on the largest corpora in ../shared/data:
- the Synthea records (FHIR bundles + CSV export, one document per record; supervised by record type), the
  largest by document count;
- the ASQA knowledge snippets (the largest text corpus; unsupervised UMAP + HDBSCAN);
- the MuSiQue passages (the largest multi-hop corpus; unsupervised).
Embeddings are computed first (timed separately, one torch thread); each fit then runs in a fresh process that
loads only the vectors and texts, so its peak RSS is the fit's own (Python + numpy + UMAP/HDBSCAN/BERTopic).
Prints figures; asserts nothing.

    nice python bench/topic_fit.py
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder


def _memory_mb(field: str) -> float:
    # /proc rather than getrusage: ru_maxrss survives exec, so a child would report its parent's peak.
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fit_only(payload: Path) -> None:
    """Child process: fit one topic model version from pickled texts/labels and an .npy of vectors."""
    with payload.open("rb") as handle:
        texts, labels = pickle.load(handle)
    vectors = np.load(payload.with_suffix(".npy"))
    from docqa.topic_models import TopicModelStore

    before = _memory_mb("VmRSS")
    start = time.perf_counter()
    info, _ = TopicModelStore(payload.parent / "models").fit_new_version(texts, vectors, labels)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "mode": info.mode, "topics": info.n_topics,
                      "outliers": info.topic_sizes.get("-1", 0), "rss_before_mb": before,
                      "rss_peak_mb": _memory_mb("VmHWM")}))


def _corpora() -> dict[str, tuple[list[str], list[str | None] | None]]:
    from docqa.ingestion.records import parse_fhir_bundle, parse_synthea_csv_dir
    from docqa_eval.datasets import load_corpus, shared_data_dir

    data = shared_data_dir()
    records = parse_synthea_csv_dir(data / "records" / "synthea_csv")
    for path in sorted((data / "records" / "synthea_fhir_r4").glob("*.json")):
        records.extend(parse_fhir_bundle(path))
    asqa = json.loads((data / "longform" / "asqa" / "asqa_dev.json").read_text())
    snippets = sorted({k["content"] for q in asqa for a in q["annotations"] for k in a["knowledge"] if k["content"]})
    musique = load_corpus("musique")
    return {
        "synthea records": ([d.content or "" for d in records], [d.meta["record_type"] for d in records]),
        "asqa knowledge": (snippets, None),
        "musique passages": ([d.content or "" for d in musique], None),
    }


def main() -> None:
    from docqa_eval.datasets import shared_data_dir

    if not shared_data_dir().is_dir():
        sys.exit(f"shared data not found at {shared_data_dir()}; nothing to measure")
    import torch
    from haystack import Document

    from docqa.embedding import build_document_embedder
    from docqa.settings import Settings

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        embedder = build_document_embedder(Settings(data_dir=Path(workdir)))
        embedder.warm_up()
        print(f"{'corpus':<18} {'docs':>6} {'embed s':>8} | {'mode':<12} {'topics':>6} {'outliers':>8} "
              f"{'fit s':>7} {'RSS before fit MB':>18} {'peak RSS MB':>11}")
        for name, (texts, labels) in _corpora().items():
            start = time.perf_counter()
            embedded = embedder.run(documents=[Document(content=t) for t in texts])["documents"]
            embed_s = time.perf_counter() - start
            payload = Path(workdir) / name.replace(" ", "_") / "payload.pkl"
            payload.parent.mkdir()
            with payload.open("wb") as handle:
                pickle.dump((texts, labels), handle)
            np.save(payload.with_suffix(".npy"), np.asarray([d.embedding for d in embedded], dtype=np.float32))
            child = subprocess.run([sys.executable, __file__, "--fit-only", str(payload)], capture_output=True,
                                   text=True, check=True)
            figures = json.loads(child.stdout.strip().splitlines()[-1])
            print(f"{name:<18} {len(texts):>6} {embed_s:>8.1f} | {figures['mode']:<12} {figures['topics']:>6} "
                  f"{figures['outliers']:>8} {figures['seconds']:>7.1f} {figures['rss_before_mb']:>18.0f} "
                  f"{figures['rss_peak_mb']:>11.0f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fit-only":
        fit_only(Path(sys.argv[2]))
    else:
        main()
