"""Texts per second of the embedding backends on the same MuSiQue passages and threads: a bare
`SentenceTransformer.encode` on PyTorch against the ONNX Runtime exports (fp32 and int8) that
`DOCQA_EMBEDDING_BACKEND=onnx|onnx-int8` uses. PyTorch runs twice: at `--batch-size` (its default 32, the bare
encode) and at its fastest batch size from a sweep over `--sweep` on the first `--sweep-texts` passages, so
the ONNX figures can be compared with both. The int8 session runs in its own micro-batches (`INT8_MICRO_BATCH`)
whatever batch size it is given. Backends take turns, round after round, so a busy machine slows them alike;
the figure is each backend's median over rounds. Prints figures; asserts nothing.

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
    parser.add_argument("--sweep", default="1,2,4,8,16,32", help="PyTorch batch sizes to try")
    parser.add_argument("--sweep-texts", type=int, default=100, help="passages per sweep point")
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

        def torch_encode(batch_size: int):
            return lambda batch: reference.encode(
                batch, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
            )

        sample = texts[: args.sweep_texts]
        torch_encode(32)(sample)  # warm-up
        sweep = {}
        for size in (int(s) for s in args.sweep.split(",")):
            started = time.perf_counter()
            torch_encode(size)(sample)
            sweep[size] = len(sample) / (time.perf_counter() - started)
        best = max(sweep, key=sweep.get)
        print("torch sweep, texts/s: " + ", ".join(f"batch {k}: {v:.1f}" for k, v in sweep.items()))
        onnx_fp32 = OnnxEncoder(model, fp32 / "model.onnx", threads=args.threads)
        onnx_int8 = OnnxEncoder(model, int8 / "model.onnx", threads=args.threads)
        backends = {
            f"torch@{args.batch_size}": torch_encode(args.batch_size),
            f"torch-best@{best}": torch_encode(best),
            f"onnx@{args.batch_size}": lambda batch: onnx_fp32.encode(batch, batch_size=args.batch_size),
            f"onnx-int8@{onnx_int8.micro_batch}": lambda batch: onnx_int8.encode(batch, batch_size=args.batch_size),
        }
        vectors = {name: encode(texts[:64]) for name, encode in backends.items()}  # warm-up, and agreement
        rates: dict[str, list[float]] = {name: [] for name in backends}
        for _ in range(args.rounds):
            for name, encode in backends.items():
                started = time.perf_counter()
                encode(texts)
                rates[name].append(len(texts) / (time.perf_counter() - started))
    print(f"{len(texts)} MuSiQue passages, {args.threads} thread(s), median of {args.rounds} interleaved rounds")
    default, fastest = (statistics.median(rates[name]) for name in list(rates)[:2])
    reference_name = f"torch@{args.batch_size}"
    header = f"{'backend@batch':<16} {'texts/s':>8} {'vs ' + reference_name:>12} {'vs torch-best':>13}"
    print(f"{header} {'cosine to torch (mean / min)':>30}   rounds")
    for name, values in rates.items():
        cosine = (vectors[name] * vectors[reference_name]).sum(axis=1)
        median = statistics.median(values)
        print(
            f"{name:<16} {median:8.1f} {median / default:11.2f}x {median / fastest:12.2f}x "
            f"{cosine.mean():14.4f} / {cosine.min():.4f}   " + " ".join(f"{v:.1f}" for v in values)
        )


if __name__ == "__main__":
    main()
