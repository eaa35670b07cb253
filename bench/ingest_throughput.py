"""Synchronous ingestion throughput (chunks/s) and the share of wall time spent outside embedding.

Corpus: ODSum stories from ../shared/data/longform/odsum_story (Project Gutenberg texts, written as .txt files
and ingested with `ingest_paths`, so reading, conversion, cleaning, chunking and store writes all count), or
the MuSiQue passages (`--corpus musique`, one short text source each). Real embedder (packaged MiniLM) and the
embedded store in a temporary data directory; one torch thread. The model load is timed separately and not
counted. A second pass over the same files measures the skip path (unchanged documents). Prints; asserts nothing.

    nice python bench/ingest_throughput.py --corpus odsum --split dev
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.embedding import resolve_backend
from docqa.ingestion.pipeline import IngestReport, Source, ingest_documents, ingest_paths
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa_eval.datasets import load_corpus, shared_data_dir


def odsum_files(split: str, limit: int | None, folder: Path) -> list[Path]:
    path = shared_data_dir() / "longform" / "odsum_story" / f"{split}.jsonl"
    if not path.is_file():
        sys.exit(f"skipped: ODSum data not found at {path} (expected ../shared/data beside the checkout)")
    files = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines()[:limit]):
        story = json.loads(line)
        file = folder / f"{number:03d}.txt"
        file.write_text(story["title"] + "\n\n" + "\n\n".join(story["divided_document"]), encoding="utf-8")
        files.append(file)
    return files


def show(label: str, report: IngestReport) -> None:
    chunks = report.chunks_written
    outside = report.seconds_total - report.seconds_embedding
    share = outside / report.seconds_total if report.seconds_total else 0.0
    rate = chunks / report.seconds_total if report.seconds_total else 0.0
    print(
        f"{label}: {len(report.written)} written, {len(report.skipped)} unchanged, {len(report.failed)} failed; "
        f"{chunks} chunks in {report.seconds_total:.2f} s = {rate:.1f} chunks/s; "
        f"embedding {report.seconds_embedding:.2f} s, outside embedding {outside:.2f} s ({share:.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=["odsum", "musique"], default="odsum")
    parser.add_argument("--split", default="dev", help="ODSum split (dev: 25 stories, ~126k words)")
    parser.add_argument("--limit", type=int, help="first N stories or passages")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data")
        runtime = Runtime(settings)
        started = time.perf_counter()
        embedder = runtime.document_embedder()
        embedder.warm_up()
        print(f"model load: {time.perf_counter() - started:.2f} s (not counted below)")
        print(f"chunking: {settings.chunk_words} words, {settings.chunk_overlap_words} overlap; "
              f"embedding backend {resolve_backend(settings)}, batch {settings.embedding_batch_size}; "
              f"torch threads {torch.get_num_threads()}")
        if args.corpus == "odsum":
            folder = Path(tmp) / "stories"
            folder.mkdir()
            files = odsum_files(args.split, args.limit, folder)
            words = sum(len(f.read_text(encoding="utf-8").split()) for f in files)
            print(f"corpus: {len(files)} ODSum {args.split} stories as .txt files, {words} words")
            show("first pass", ingest_paths(runtime, files, "bench", ["everyone"], embedder=embedder))
            show("second pass (unchanged)", ingest_paths(runtime, files, "bench", ["everyone"], embedder=embedder))
        else:
            passages = load_corpus("musique")[: args.limit]
            sources = [Source(source_id=d.id, name=f"{d.id}.txt", text=d.content or "", title=d.meta["title"])
                       for d in passages]
            print(f"corpus: {len(sources)} MuSiQue passages as text sources")
            show("first pass", ingest_documents(runtime, sources, "bench", ["everyone"], embedder=embedder))
            show("second pass (unchanged)", ingest_documents(runtime, sources, "bench", ["everyone"],
                                                             embedder=embedder))


if __name__ == "__main__":
    main()
