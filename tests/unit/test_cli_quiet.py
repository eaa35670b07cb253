"""A quiet CLI: other libraries' warnings and log records hidden unless -v, docqa's kept; the strategy list read
without importing Haystack; the spinner only on a terminal; the one-time export announced once."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import warnings

import pytest

from docqa import cli_output
from docqa.cli_output import Spinner, quiet_third_party
from docqa.strategy_listing import builtin_strategies


@pytest.fixture
def restored_logging_and_warnings():
    root = logging.getLogger()
    handlers, filters = list(root.handlers), {h: list(h.filters) for h in root.handlers}
    with warnings.catch_warnings():
        yield
    root.handlers[:] = handlers
    for handler, kept in filters.items():
        handler.filters[:] = kept


def test_third_party_records_and_warnings_are_hidden_docqa_ones_kept(restored_logging_and_warnings,
                                                                     monkeypatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a fresh CLI process
    monkeypatch.setattr(sys, "stderr", stream)
    quiet_third_party(verbose=False)
    logging.getLogger("haystack.components.generators").warning("raise max_tokens to get longer answers")
    logging.getLogger("onnxruntime.quantization").warning("please run pre-processing before quantization")
    logging.getLogger("docqa.embedding").warning("the store was embedded by another model")
    logging.getLogger("httpx").error("connection refused")
    assert stream.getvalue().splitlines() == ["WARNING the store was embedded by another model",
                                              "ERROR connection refused"]
    with warnings.catch_warnings(record=True) as caught:
        quiet_third_party(verbose=False)
        warnings.warn_explicit("Converting a tensor to a Python boolean", UserWarning, "x.py", 1, module="torch.jit")
    assert caught == []


def test_a_host_owns_its_logging_handlers(restored_logging_and_warnings) -> None:
    handler = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(handler)
    quiet_third_party(verbose=False)
    assert handler.filters == []


def test_verbose_shows_everything(restored_logging_and_warnings) -> None:
    stream = io.StringIO()
    logging.getLogger().addHandler(logging.StreamHandler(stream))
    quiet_third_party(verbose=True)
    logging.getLogger("onnxruntime.quantization").warning("advice")
    assert "advice" in stream.getvalue()


def test_the_strategy_list_matches_the_registry_and_imports_no_haystack() -> None:
    code = ("import sys; from docqa.strategy_listing import builtin_strategies as b; r = b(); "
            "print(len(r), 'haystack' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"]
    from docqa.pipelines.registry import available_pipelines

    builtin = [(s.name, s.description) for s in available_pipelines() if s.source is None]
    assert builtin_strategies() == sorted(builtin)


def test_docqa_pipelines_lists_without_loading_a_model(capsys) -> None:
    from docqa.cli import main

    assert main(["pipelines"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == [name for name, _ in builtin_strategies()]


def test_the_spinner_shows_elapsed_time_on_a_terminal_only() -> None:
    piped = io.StringIO()
    with Spinner("answering", stream=piped, interval_s=0.01):
        pass
    assert piped.getvalue() == ""
    tty = io.StringIO()
    with Spinner("answering with standard", stream=tty, interval_s=0.01, force=True):
        import time

        time.sleep(0.05)
    text = tty.getvalue()
    assert "answering with standard · 0 s" in text
    assert text.endswith("\r")  # the line is cleared for the answer


def test_the_one_time_export_is_announced_only_when_pending(monkeypatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(cli_output, "embedding_export_pending", lambda settings: True)
    assert cli_output.announce_embedding_export(object(), stream)
    assert stream.getvalue() == "preparing the embedding model, once per machine: ~15 s\n"
    monkeypatch.setattr(cli_output, "embedding_export_pending", lambda settings: False)
    assert not cli_output.announce_embedding_export(object(), stream)


def test_a_pending_export_is_read_from_the_export_cache(tmp_path) -> None:
    from docqa.settings import Settings

    cold = Settings(data_dir=tmp_path / "data", embedding_cache_dir=tmp_path / "cache", embedding_backend="onnx-int8")
    assert cli_output.embedding_export_pending(cold)
    assert not cli_output.embedding_export_pending(cold.model_copy(update={"embedding_backend": "torch"}))
