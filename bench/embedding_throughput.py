"""Texts per second of the embedding backends on the same MuSiQue passages, threads and batch size: a bare
`SentenceTransformer.encode` on PyTorch against the ONNX Runtime exports (fp32 and int8) that
`DOCQA_EMBEDDING_BACKEND=onnx|onnx-int8` uses. Backends take turns, round after round, so a busy machine
slows them alike; the figure is each backend's median over rounds. Prints figures; asserts nothing.

    nice -n 10 python bench/embedding_throughput.py --texts 300 --rounds 3 --threads 1
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.embedding import OnnxEncoder, embedding_model_path, ensure_onnx_export
from docqa.settings import Settings
from docqa_eval.datasets import load_corpus, shared_data_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=300, help="MuSiQue passages to embed per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="PyTorch and ONNX Runtime intra-op threads")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--models-dir", default=None, help="where exports are kept (default: a temporary dir)")
    args = parser.parse_args()
    if not (shared_data_dir() / "multihop").is_dir():
        sys.exit(f"shared data not found at {shared_data_dir()}; nothing to measure")

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = [d.content or "" for d in load_corpus("musique")][: args.texts]
    model = embedding_model_path(Settings())
    with tempfile.TemporaryDirectory() as workdir:
        models_dir = args.models_dir or workdir
        started = time.perf_counter()
        fp32 = ensure_onnx_export(model, models_dir)
        int8 = ensure_onnx_export(model, models_dir, quantize=True)
        print(f"exports ready in {time.perf_counter() - started:.1f} s ({models_dir})")
        reference = SentenceTransformer(model, device="cpu", local_files_only=True)
        backends = {
            "torch": lambda batch: reference.encode(
                batch, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True
            ),
            "onnx": OnnxEncoder(model, fp32 / "model.onnx", threads=args.threads).encode,
            "onnx-int8": OnnxEncoder(model, int8 / "model.onnx", threads=args.threads).encode,
        }
        vectors = {name: encode(texts[:64]) for name, encode in backends.items()}  # warm-up, and agreement
        rates: dict[str, list[float]] = {name: [] for name in backends}
        for _ in range(args.rounds):
            for name, encode in backends.items():
                started = time.perf_counter()
                if name == "torch":
                    encode(texts)
                else:
                    encode(texts, batch_size=args.batch_size)
                rates[name].append(len(texts) / (time.perf_counter() - started))
    print(
        f"{len(texts)} MuSiQue passages, {args.threads} thread(s), batch {args.batch_size}, "
        f"median of {args.rounds} interleaved rounds"
    )
    base = statistics.median(rates["torch"])
    print(f"{'backend':<10} {'texts/s':>8} {'vs torch':>8} {'cosine to torch (mean / min)':>30}   rounds")
    for name, values in rates.items():
        cosine = (vectors[name] * vectors["torch"]).sum(axis=1)
        median = statistics.median(values)
        print(
            f"{name:<10} {median:8.1f} {median / base:7.2f}x {cosine.mean():14.4f} / {cosine.min():.4f}   "
            + " ".join(f"{v:.1f}" for v in values)
        )


if __name__ == "__main__":
    main()
