"""Fixtures for integration tests: real processes and services on loopback."""

import importlib.util
from collections.abc import Iterator

import pytest

from docqa.llm.local_server import ensure_local_llm, stop_local_llm
from docqa.settings import Settings


@pytest.fixture(scope="session")
def local_llm_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings whose every LLM role uses a real llama_cpp.server running the packaged model.

    The server belongs to the settings' data_dir: a subprocess given `DOCQA_DATA_DIR=<data_dir>` (and no
    `DOCQA_LLM_BASE_URL`) reuses the same server instead of starting another one. Stopped at session end.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (pip install 'docqa[local-llm]')")
    settings = Settings(data_dir=tmp_path_factory.mktemp("llm-data"), llm_max_tokens=64)
    ensure_local_llm(settings)
    yield settings
    stop_local_llm(settings)
