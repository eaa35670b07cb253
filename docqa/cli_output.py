"""What the command line shows besides its results: third-party noise hidden, one line per slow one-time step,
and a spinner while a question waits on the model.

Without `-v`, warnings raised outside docqa (PyTorch's TracerWarning during the ONNX export, ONNX Runtime's
quantisation advice, a client library's advice about its own parameters) and log records of other libraries
below ERROR are dropped, and Hugging Face progress bars ("Loading weights") are off; docqa's own warnings, errors
and progress bars stay. With `-v` everything is shown, as before.

Usage:
    quiet_third_party(verbose=args.verbose)        # once, before any heavy import
    announce_embedding_export(settings)            # "preparing the embedding model, once per machine: ~15 s"
    with Spinner("answering"):                     # "⠹ answering · 12 s" on a terminal's stderr
        result = run()
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
import warnings
from types import TracebackType
from typing import Any, TextIO

# Libraries whose own switches turn their progress bars and advisory messages off.
_QUIET_ENV = {
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
}
_OWN_LOGGERS = ("docqa", "__main__")
EXPORT_SECONDS_HINT = 15


class _OwnRecordsOnly(logging.Filter):
    """Passes docqa's records at any level and other libraries' from ERROR up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name.startswith(_OWN_LOGGERS)


def quiet_third_party(verbose: bool) -> None:
    """Hide other libraries' warnings, advice and progress bars unless `verbose`."""
    if verbose:
        return
    for name, value in _QUIET_ENV.items():
        os.environ.setdefault(name, value)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"docqa(\.|$)")
    # Deprecations raised at docqa's call into a library (torch.onnx.export) are for developers, not users.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    root = logging.getLogger()
    if root.handlers:
        return  # a host (a test runner, an application embedding docqa) owns logging: its handlers stay as they are
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    for handler in root.handlers:
        handler.addFilter(_OwnRecordsOnly())


def embedding_export_pending(settings: Any) -> bool:
    """Whether embedding will first export the model to ONNX on this machine (the one slow first run)."""
    try:
        from docqa.embedding import embedding_model_path, export_cache_dir, onnx_export_dir, resolve_backend

        backend = resolve_backend(settings)
        if backend not in ("onnx", "onnx-int8"):
            return False
        target = onnx_export_dir(embedding_model_path(settings), str(export_cache_dir(settings)),
                                 quantize=backend == "onnx-int8")
    except Exception:  # a hint must never stop the command; the embedder reports real errors
        return False
    return not (target / "export.json").is_file()


def announce_embedding_export(settings: Any, stream: TextIO | None = None) -> bool:
    """Print one line before the one-time ONNX export of the embedding model; True when it was printed."""
    if not embedding_export_pending(settings):
        return False
    print(f"preparing the embedding model, once per machine: ~{EXPORT_SECONDS_HINT} s",
          file=stream or sys.stderr, flush=True)
    return True


class Spinner:
    """A one-line spinner with the elapsed seconds on a terminal, cleared when the block ends.

    Silent when the stream is not a terminal (pipes, files, CI logs) or when `enabled` is False.
    """

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool = True, interval_s: float = 0.1,
                 force: bool = False) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled and (is_tty or force)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def __enter__(self) -> Spinner:
        if self.enabled:
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._spin, name="docqa-spinner", daemon=True)
            self._thread.start()
        return self

    def _spin(self) -> None:
        for frame in itertools.cycle(self.FRAMES):
            text = f"{frame} {self.label} · {time.monotonic() - self._started:.0f} s"
            self._width = max(self._width, len(text))
            self.stream.write("\r" + text)
            self.stream.flush()
            if self._stop.wait(self.interval_s):
                return

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
