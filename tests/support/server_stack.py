"""The whole server stack on loopback for integration tests and benchmarks (tests only): a fresh PostgreSQL
database (SQLite when PostgreSQL is unreachable), the scripted OpenAI-compatible LLM server, accounts, an
access-control corpus with one unique marker word per document, and gunicorn with uvicorn workers.

Usage:
    with server_stack(tmp_path) as stack:
        httpx.post(f"{stack.base_url}/v1/query", headers=stack.auth("alice"), json={...})
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.server.config import ServerSettings
from tests.support.live_server import LiveServer, free_port, gunicorn_server, postgres_available, postgres_database
from tests.support.scripted_openai_server import scripted_openai_server
from tests.support.server_app import seed_accounts

# user id -> (tenant, role, groups). "dave" shares a group name with acme users but lives in another tenant.
ACCOUNTS: dict[str, tuple[str, str, list[str]]] = {
    "alice": ("acme", "user", ["finance"]),
    "bob": ("acme", "user", ["hr"]),
    "carol": ("acme", "user", []),
    "root": ("acme", "admin", []),
    "audrey": ("acme", "auditor", []),
    "dave": ("globex", "user", ["finance"]),
    "zadmin": ("globex", "admin", []),
    "zaudit": ("globex", "auditor", []),
}

# (tenant, access principals, marker word); every document says the same thing apart from its marker.
CORPUS: list[tuple[str, list[str], str]] = [
    ("acme", ["everyone"], "quillfeather"),
    ("acme", ["group:finance"], "brasswhistle"),
    ("acme", ["group:hr"], "mossglimmer"),
    ("acme", ["user:alice"], "tinderquartz"),
    ("acme", ["user:carol"], "velvetanchor"),
    ("globex", ["everyone"], "emberlattice"),
    ("globex", ["group:finance"], "frostpillar"),
]
QUESTION = "What is the code word of the quarterly policy report?"
# What the scripted model writes before echoing its prompt: a sentence the grounding check finds in passage [1], so
# answers are shown as the model's with a citation (a reply sharing nothing with the passages would cite none).
SCRIPTED_ANSWER = "Scripted answer. The quarterly policy report gives its code word [1]."


def document_text(marker: str) -> str:
    return (f"Quarterly policy report. The code word of this quarterly policy report is {marker}. "
            "The report covers budgets, hiring and travel rules for the quarterly review.")


def readable_markers(user_id: str) -> set[str]:
    tenant, _role, groups = ACCOUNTS[user_id]
    principals = {"everyone", f"user:{user_id}", *(f"group:{g}" for g in groups)}
    return {marker for t, access, marker in CORPUS if t == tenant and principals & set(access)}


ALL_MARKERS = {marker for _t, _a, marker in CORPUS}


@dataclass
class Stack:
    server: LiveServer
    keys: dict[str, str]
    settings: ServerSettings
    database: str
    # The server's environment: `gunicorn_server(stack.env, free_port())` starts another on the same data.
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def auth(self, user_id: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[user_id]}"}


def ingest_corpus(settings: ServerSettings) -> None:
    from docqa.ingestion.pipeline import Source, ingest_documents

    runtime = Runtime(settings)
    for tenant, access, marker in CORPUS:
        source = Source(source_id=f"{marker}.txt", name=f"{marker}.txt", text=document_text(marker),
                        title=f"Report {marker}")
        report = ingest_documents(runtime, [source], tenant, access)
        if report.failed:
            raise RuntimeError(f"could not ingest {marker}: {report.failed}")


@contextmanager
def server_stack(workdir: Path, *, workers: int = 2, llm_mode: str = "echo", llm_delay_ms: int = 0,
                 extra_env: dict[str, str] | None = None, llm_calls_log: Path | None = None) -> Iterator[Stack]:
    data_dir = workdir / "data"
    with ExitStack() as stack:
        database = stack.enter_context(postgres_database()) if postgres_available() else ""
        llm_url = stack.enter_context(scripted_openai_server(
            mode=llm_mode, answer=SCRIPTED_ANSWER, delay_ms=llm_delay_ms,
            calls_log=str(llm_calls_log) if llm_calls_log else None))
        env = {
            "DOCQA_DATA_DIR": str(data_dir),
            "DOCQA_LLM_BASE_URL": llm_url,
            "DOCQA_LLM_MODEL": "scripted",
            "DOCQA_LLM_API_KEY": "not-checked",
            "DOCQA_LLM_TIMEOUT_S": "30",
            "DOCQA_SERVER_WORKERS": str(workers),
            "HAYSTACK_TELEMETRY_ENABLED": "False",
            **({"DOCQA_DATABASE_URL": database} if database else {}),
            **(extra_env or {}),
        }
        settings = ServerSettings(data_dir=data_dir, database_url=database or None, llm_base_url=llm_url,
                                  llm_model="scripted")
        upgrade_database(settings)
        keys = seed_accounts(settings, ACCOUNTS)
        ingest_corpus(settings)
        server = stack.enter_context(gunicorn_server(env, free_port(), log_path=workdir / "gunicorn.log"))
        yield Stack(server=server, keys=keys, settings=settings, database=database or "sqlite", env=env)
