"""What every request handler of one worker shares: settings, runtime, database sessions, limiters and the
question service (`context.questions`) every question goes through."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy.orm import sessionmaker

from docqa.accounts.oidc import TokenVerifier
from docqa.questions import QuestionService
from docqa.questions.pipeline_cache import PipelineCache
from docqa.run_control import RunControl
from docqa.runtime import Runtime
from docqa.server.config import ServerSettings
from docqa.server.limits import QuerySlots, RateLimiter, RedisRateLimiter
from docqa.server.signin_throttle import SigninThrottle, build_signin_throttle


@dataclass
class ServerContext:
    settings: ServerSettings
    runtime: Runtime
    sessions: sessionmaker
    rate_limiter: RateLimiter | RedisRateLimiter
    slots: QuerySlots
    token_verifier: TokenVerifier | None = None
    signin_throttle: SigninThrottle | None = None
    questions: QuestionService = field(init=False)

    def __post_init__(self) -> None:
        if self.signin_throttle is None:
            self.signin_throttle = build_signin_throttle(self.settings)
        # Threads beyond the slot count absorb runs abandoned by a query timeout.
        self.questions = QuestionService(
            self.runtime, settings=self.settings, sessions=self.sessions, slots=self.slots,
            timeout_s=self.settings.query_timeout_s, workers=self.settings.max_concurrent_queries * 2,
        )

    @property
    def pipelines(self) -> PipelineCache:
        return self.questions.pipelines

    @property
    def executor(self) -> ThreadPoolExecutor:
        return self.questions.executor

    @property
    def active_runs(self) -> set[RunControl]:
        """Runs in progress, so that a stopping worker cancels them and each still leaves its trace."""
        return self.questions.active_runs

    @property
    def stopping(self) -> bool:
        """Set when the worker is told to stop (`shutdown.stop_runs_now`): no new run begins."""
        return self.questions.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self.questions.stopping = value

    def close(self) -> None:
        self.questions.close()
        if isinstance(self.rate_limiter, RedisRateLimiter):
            self.rate_limiter.close()
        if self.signin_throttle is not None:
            self.signin_throttle.close()
