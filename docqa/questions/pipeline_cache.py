"""Built strategies reused across questions: building one loads models and clients, running one does not.

Keyed by the strategy name and its validated options model with every default filled in
(`registry.resolve_options`), so `{}` and `{"top_k": 5}` (5 being the default) share one built pipeline.
A build runs outside the cache's lock: the first asker of a key builds it while later askers of the same key
wait for that build (a `Future`), and askers of other keys go on, building theirs in parallel. A failed build is
not kept; every asker waiting for it gets its error, and the next asker tries again.

Usage:
    cache = PipelineCache(runtime)
    built = cache.get("standard", resolve_options("standard", {"top_k": 3}, settings))
    built.pipeline.run(question, scope); built.config_hash
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from docqa.pipelines.base import QAPipeline, config_hash
from docqa.pipelines.options import StrategyOptions
from docqa.pipelines.registry import available_pipelines, build_from_options
from docqa.runtime import Runtime

DEFAULT_SIZE = 32


@dataclass(frozen=True)
class BuiltPipeline:
    """A built strategy and the hash of its config, computed once when it was built."""

    pipeline: QAPipeline
    config_hash: str


class PipelineCache:
    """`get(name, options)` builds a strategy once per distinct (name, options model); keeps the `size` most
    recently used."""

    def __init__(self, runtime: Runtime, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError("the cache must hold at least one pipeline")
        self.runtime = runtime
        self.size = size
        self._entries: OrderedDict[tuple[str, StrategyOptions], Future[BuiltPipeline]] = OrderedDict()
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return [spec.name for spec in available_pipelines()]

    def get(self, name: str, options: StrategyOptions) -> BuiltPipeline:
        """The built strategy for (`name`, `options`), building it in this thread when nobody has yet.

        :raises Exception: whatever the strategy's builder raised (for every asker waiting on that build).
        """
        key = (name, options)
        with self._lock:
            future = self._entries.get(key)
            building = future is None
            if future is None:
                future = self._entries[key] = Future()
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
        if building:
            self._build(key, future)
        return future.result()

    def _build(self, key: tuple[str, StrategyOptions], future: Future[BuiltPipeline]) -> None:
        name, options = key
        try:
            pipeline = build_from_options(name, self.runtime, options)
            future.set_result(BuiltPipeline(pipeline, config_hash(pipeline.config())))
        except BaseException as exc:
            with self._lock:
                if self._entries.get(key) is future:
                    del self._entries[key]
            future.set_exception(exc)
