"""What every request handler of one worker shares: settings, runtime, database sessions and limiters."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy.orm import sessionmaker

from docqa.accounts.oidc import TokenVerifier
from docqa.run_control import OUTCOME_CANCELLED, RunControl
from docqa.runtime import Runtime
from docqa.server.config import ServerSettings
from docqa.server.limits import QuerySlots, RateLimiter, RedisRateLimiter
from docqa.server.pipeline_cache import PipelineCache
from docqa.server.signin_throttle import SigninThrottle, build_signin_throttle

logger = logging.getLogger(__name__)


@dataclass
class ServerContext:
    settings: ServerSettings
    runtime: Runtime
    sessions: sessionmaker
    rate_limiter: RateLimiter | RedisRateLimiter
    slots: QuerySlots
    token_verifier: TokenVerifier | None = None
    signin_throttle: SigninThrottle | None = None
    pipelines: PipelineCache = field(init=False)
    executor: ThreadPoolExecutor = field(init=False)
    # Runs in progress, so that a stopping server cancels them and each still leaves its trace.
    active_runs: set[RunControl] = field(init=False, default_factory=set)
    # Set when the worker is told to stop (`shutdown.stop_runs_now`): no new run begins.
    stopping: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.signin_throttle is None:
            self.signin_throttle = build_signin_throttle(self.settings)
        self.pipelines = PipelineCache(self.runtime)
        # Threads beyond the slot count absorb runs abandoned by a query timeout.
        self.executor = ThreadPoolExecutor(
            max_workers=self.settings.max_concurrent_queries * 2, thread_name_prefix="docqa-query"
        )

    def close(self) -> None:
        for control in list(self.active_runs):
            try:
                control.stop(OUTCOME_CANCELLED)
            except Exception:  # one failed trace write must not keep the others from being written
                logger.exception("could not record a run cancelled at shutdown")
        self.executor.shutdown(wait=False, cancel_futures=True)
        if isinstance(self.rate_limiter, RedisRateLimiter):
            self.rate_limiter.close()
        if self.signin_throttle is not None:
            self.signin_throttle.close()
