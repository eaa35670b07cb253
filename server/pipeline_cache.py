"""Built pipelines reused across requests: building one loads models and clients, running one does not."""

from __future__ import annotations

import json
import threading
from typing import Any

from docqa.pipelines.base import QAPipeline
from docqa.pipelines.registry import available_pipelines, build_pipeline, check_options
from docqa.runtime import Runtime


class PipelineCache:
    """`get(name, options)` builds a pipeline once per distinct (name, options) and keeps at most `size` of them."""

    def __init__(self, runtime: Runtime, size: int = 32) -> None:
        self.runtime = runtime
        self.size = size
        self._built: dict[str, QAPipeline] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return [spec.name for spec in available_pipelines()]

    def check(self, name: str, options: dict[str, Any] | None) -> None:
        """Validate a caller's options for `name` before any work starts.

        :raises InvalidOptionsError: an unknown, mistyped or out-of-range option.
        """
        check_options(name, options, self.runtime)

    def get(self, name: str, options: dict[str, Any] | None = None) -> QAPipeline:
        key = json.dumps([name, options or {}], sort_keys=True, default=str)
        with self._lock:
            pipeline = self._built.get(key)
            if pipeline is None:
                pipeline = build_pipeline(name, self.runtime, **(options or {}))
                if len(self._built) >= self.size:
                    self._built.pop(next(iter(self._built)))
                self._built[key] = pipeline
            return pipeline
