"""Settings from `DOCQA_*` environment variables, with an embedded default for every service."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

LLMRole = Literal["reasoner", "summarizer", "generator", "grader", "planner"]
LLM_ROLES: tuple[str, ...] = ("reasoner", "summarizer", "generator", "grader", "planner")
# `docqa eval --judge`'s grader, configured like a role (DOCQA_LLM_ROLES__JUDGE__*); no strategy uses it, so it
# is not among LLM_ROLES, the models every trace records as having answered.
JUDGE_ROLE = "judge"


class LLMEndpoint(BaseModel):
    """One OpenAI-compatible endpoint. Unset fields fall back to the global `DOCQA_LLM_*` values."""

    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None


class Settings(BaseSettings):
    """All configuration. Example: `DOCQA_LLM_BASE_URL=http://vllm:8000/v1 DOCQA_LLM_MODEL=qwen docqa ask ...`.

    Per-role LLM overrides use nested variables, e.g. `DOCQA_LLM_ROLES__REASONER__MODEL=big-model`.
    """

    model_config = SettingsConfigDict(env_prefix="DOCQA_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(default_factory=lambda: Path.home() / ".local" / "share" / "docqa")
    tenant: str = "default"

    # Document store: the embedded store under data_dir unless an Elasticsearch URL is set.
    elasticsearch_url: str | None = None
    elasticsearch_index: str = "docqa"
    elasticsearch_api_key: SecretStr | None = None

    # Embeddings: None means the packaged all-MiniLM-L6-v2; any local sentence-transformers directory works.
    embedding_model: str | None = None
    embedding_batch_size: int = 32
    # `torch` (sentence-transformers on PyTorch), `onnx` (the model exported once to ONNX on this machine,
    # verified to embed like PyTorch), `onnx-int8` (an int8-quantised export: a separate embedding space, several
    # times faster on CPUs) or `auto`: the backend that embedded the existing embedded store, else `onnx-int8`.
    embedding_backend: Literal["auto", "torch", "onnx", "onnx-int8"] = "auto"
    # Where ONNX exports are kept; None: $XDG_CACHE_HOME/docqa/models (~/.cache), or data_dir/models when that
    # cannot be written. Exports depend only on the model, so every data dir on a machine shares them.
    embedding_cache_dir: Path | None = None
    # ONNX Runtime intra-op threads; 0 means OMP_NUM_THREADS if set, else the runtime's default.
    embedding_threads: int = Field(default=0, ge=0)

    # Retrieval defaults.
    top_k: int = Field(default=5, ge=1, le=100)
    retrieval_candidates: int = Field(default=20, ge=1, le=1000)
    rrf_k: int = Field(default=60, ge=1)
    # The embedded store searches embeddings through an HNSW index (filters still exact) in index blocks of at
    # least this many chunks, exactly below.
    ann_min_chunks: int = Field(default=100_000, ge=0)
    # A worker writes the shared, memory-mapped index snapshot once this many changes are pending (0: only
    # `docqa store compact` writes one); below it every process indexes the difference from SQLite itself.
    snapshot_rows: int = Field(default=50_000, ge=0)

    # Chunking.
    chunk_words: int = Field(default=200, ge=20)
    chunk_overlap_words: int = Field(default=30, ge=0)
    max_file_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    # Every document conversion (uploads, ingestion jobs, web pages) runs in a child process within these
    # bounds (docqa.conversion.conversion_box): what a ZIP-based file's members may declare (before any is
    # inflated), the memory the child may add to its start size, and its wall time; it is killed at a limit.
    convert_max_uncompressed_bytes: int = Field(default=100 * 1024 * 1024, ge=1)
    convert_max_member_bytes: int = Field(default=64 * 1024 * 1024, ge=1)
    convert_max_members: int = Field(default=10_000, ge=1)
    convert_max_ratio: float = Field(default=200.0, gt=1)
    convert_max_memory_mb: int = Field(default=1024, ge=64)
    convert_timeout_s: float = Field(default=120.0, gt=0)
    # The text one conversion may give back (what is then chunked and embedded in the caller's process).
    convert_max_text_chars: int = Field(default=10_000_000, ge=1000)
    # Spreadsheet rows (XLSX, ODS, CSV: all sheets of one file) a conversion may read; a larger file fails.
    convert_max_table_rows: int = Field(default=200_000, ge=1)
    # OCR (Tesseract) of scanned PDF pages and images: language data (`eng`, `eng+deu`: installed
    # tesseract-ocr-* packages), and per file at most this many pages and this much wall time (past either, the
    # file fails); the conversion's wall-time limit grows by `ocr_timeout_s` for files that need OCR.
    ocr_enabled: bool = True
    ocr_languages: str = Field(default="eng", pattern=r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$")
    ocr_max_pages: int = Field(default=50, ge=1)
    ocr_timeout_s: float = Field(default=300.0, gt=0)

    # LLM: one OpenAI-compatible client path. With no base URL the packaged model is served locally.
    llm_base_url: str | None = None
    llm_model: str = "local"
    llm_api_key: SecretStr | None = None
    llm_roles: dict[str, LLMEndpoint] = Field(default_factory=dict)
    llm_timeout_s: float = Field(default=120.0, gt=0)
    llm_max_retries: int = Field(default=1, ge=0)
    llm_max_tokens: int = Field(default=256, ge=1)
    llm_temperature: float = 0.0

    # Embedded LLM server (llama_cpp.server on loopback).
    local_llm_model_path: Path | None = None
    local_llm_chat_format: str = "gemma"
    local_llm_ctx: int = 4096
    local_llm_threads: int = 2
    local_llm_startup_timeout_s: float = 60.0

    max_question_chars: int = Field(default=2000, ge=1)
    # How a follow-up in a conversation becomes a standalone question (docqa.followups): `deterministic` rules,
    # `llm` (the summarizer role's model condenses the exchange, checked against the rules' referents) or `auto`
    # (the model only when its endpoint passes a small built-in check, once per process).
    conversation_rewrite: Literal["deterministic", "llm", "auto"] = "deterministic"
    # Regular expressions of further secrets to mask in every question at its entry, before it is stored, sent to
    # a model, shown in steps or logged (e.g. '["corp_[0-9a-f]{32}"]'); docqa keys, cloud keys and tokens, bearer
    # tokens and JWTs are always masked (`docqa.audit.scrub`).
    secret_patterns: list[str] = Field(default_factory=list, max_length=100)

    # Server-side ceilings of what one question may cost, whatever the caller's options ask for. Options above
    # a ceiling are refused (422); the LLM client enforces the call budget, prompt size and token cap per call.
    max_top_k: int = Field(default=100, ge=1)
    max_iterations: int = Field(default=10, ge=1)
    max_scoped_records: int = Field(default=1000, ge=1)
    max_prompt_documents: int = Field(default=40, ge=1)
    max_document_chars: int = Field(default=2000, ge=100)
    max_completion_tokens: int = Field(default=2048, ge=1)
    max_prompt_chars: int = Field(default=120_000, ge=1000)
    max_llm_calls_per_question: int = Field(default=64, ge=1)
    max_tree_depth: int = Field(default=3, ge=1, le=4)
    max_tree_breadth: int = Field(default=8, ge=1, le=10)
    # Directory of prompt files that override the packaged templates of the same name.
    prompts_dir: Path | None = None
    # Directory of Haystack YAML strategies: each `NAME.yaml` is a strategy called NAME (docqa and Haystack
    # component types only); an invalid file is logged and skipped.
    pipelines_dir: Path | None = None
    # OTLP HTTP endpoint (e.g. http://otel-collector:4318): every span (each trace step and model call) goes there.
    otel_exporter_otlp_endpoint: str | None = None

    # ReSP: iteration limit M, and the cosine similarity from which a planned sub-question repeats an asked one.
    resp_max_iterations: int = Field(default=3, ge=1, le=10)
    resp_repeat_similarity: float = Field(default=0.92, gt=0.0, le=1.0)

    # MSPR: the sources in order of preference (`collection:NAME` or `web`), agent steps (AWI) and answer
    # reviews (SRT). The default keeps every question inside the organisation (no web endpoint needed): the main
    # collection first, then an archive collection (`docqa ingest --collection archive`).
    mspr_sources: str = "collection:main,collection:archive"
    mspr_max_steps: int = Field(default=5, ge=1, le=20)
    mspr_max_reviews: int = Field(default=1, ge=0, le=5)
    # A SearXNG-compatible JSON search endpoint (GET ?q=...&format=json) for the `web` source; its results are
    # public. Each search is bounded by the timeout and the response size.
    web_search_url: str | None = None
    web_search_timeout_s: float = Field(default=5.0, gt=0, le=60)
    web_search_max_bytes: int = Field(default=1_000_000, ge=1000)
    # Every web source's first results are read (0: keep only the search snippets): each page within the timeout
    # and size, converted and chunked like an upload. Pages on loopback, private and link-local addresses are
    # refused unless allowed, so that a search result cannot make the server read its own network.
    web_fetch_pages: int = Field(default=3, ge=0, le=20)
    web_fetch_timeout_s: float = Field(default=5.0, gt=0, le=60)
    web_fetch_max_bytes: int = Field(default=2_000_000, ge=1000)
    web_fetch_allow_private: bool = False

    # ConTReGen: tree depth and sub-questions per plan (the paper: 2 and 5), and branches expanded or summarised
    # at once per question (each is one LLM request in flight: size it to what the endpoint serves in parallel).
    contregen_max_depth: int = Field(default=2, ge=1, le=4)
    contregen_max_breadth: int = Field(default=5, ge=1, le=10)
    contregen_concurrency: int = Field(default=4, ge=1, le=32)

    # Sources kept in sync (`docqa sources`). Folders, local Git repositories and ACL map files an admin may name
    # through the HTTP API must lie under one of these directories (os.pathsep-separated; empty: none, only the
    # CLI may define them); hosts named through the API must be public unless web_fetch_allow_private.
    # `docqa serve` runs the scheduled syncs that are due when sources_scheduler is on (without a broker's beat).
    sources_roots: str = ""
    sources_scheduler: bool = False

    # Services used by later layers; None means the embedded default.
    database_url: str | None = None
    broker_url: str | None = None

    # Ingestion queue. A message a killed worker had taken is redelivered after the visibility timeout, so a
    # task must finish well within it (its time limit is derived from it).
    broker_visibility_timeout_s: int = Field(default=900, ge=5)
    ingest_items_per_task: int = Field(default=8, ge=1, le=256)
    # Attempts whose worker process crashed on the item (the worker's main process survived) fail it after
    # ingest_max_attempts; attempts cut short by the whole worker's death (deploys, node OOM) only after this many.
    ingest_max_attempts: int = Field(default=3, ge=1)
    ingest_max_interruptions: int = Field(default=10, ge=1)
    ingest_task_expires_s: int = Field(default=7 * 24 * 3600, ge=60)
    # Topic models are fitted automatically after a records ingestion when a tenant has none yet, or when its
    # corpus has grown by this fraction since the last fit (a background job on the workers when a broker is set).
    topic_autofit: bool = True
    topic_refit_growth: float = Field(default=0.25, gt=0.0, le=100.0)

    # Stored conversations untouched for longer are deleted (`docqa conversations purge`, or lazily when a user
    # lists theirs) and no longer readable; 0 keeps them until their owner deletes them.
    conversation_retention_days: int = Field(default=0, ge=0)

    # Audit trail keys. Unset means key files generated once under data_dir/audit (0600); every host that
    # writes or verifies one shared database must be given the same keys.
    audit_hmac_key: SecretStr | None = None
    # Passages searched for or read directly through the MCP server (`search`, `read_passage`) are audit events
    # (`passages.searched`, `passage.read`), not only the questions' traces.
    audit_passage_reads: bool = False
    # Ed25519 private key for signed checkpoints: base64 of the 32-byte seed, or a PEM (PKCS#8) block.
    audit_signing_key: SecretStr | None = None
    # Audit retention policy: `docqa audit retain` archives links older than `audit_retention_days` (default about
    # six months, the EU AI Act's minimum for automatic logs); a run or policy keeping less than
    # `audit_retention_floor_days` is refused.
    audit_retention_days: int = Field(default=183, ge=1)
    audit_retention_floor_days: int = Field(default=183, ge=0)
    # SIEM collector `docqa audit export --format ocsf|ecs` streams to when no --out is given (http(s) URL).
    audit_export_url: str | None = None

    @field_validator("pipelines_dir", "prompts_dir", "embedding_cache_dir", "local_llm_model_path", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: object) -> object:
        # `DOCQA_PIPELINES_DIR=` would otherwise be Path(""), the current directory.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("secret_patterns")
    @classmethod
    def _compilable_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"secret pattern {pattern!r} is not a regular expression: {exc}") from None
            # A pattern matching the empty string would mask between every character of every question.
            if compiled.fullmatch(""):
                raise ValueError(f"secret pattern {pattern!r} matches the empty string")
        return patterns

    def store_dir(self) -> Path:
        return self.data_dir / "store"

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'docqa.sqlite3'}"

    def endpoint_for(self, role: str) -> LLMEndpoint:
        """The effective endpoint of a role: its override, else the global values (base_url may stay None)."""
        override = self.llm_roles.get(role, LLMEndpoint())
        return LLMEndpoint(
            base_url=override.base_url or self.llm_base_url,
            model=override.model or self.llm_model,
            api_key=override.api_key or self.llm_api_key,
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
