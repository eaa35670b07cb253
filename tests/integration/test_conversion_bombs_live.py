"""Hostile files uploaded to the deployed server (gunicorn, one worker, no broker: the upload's job runs in the
worker): each becomes a failed item saying which bound it crossed, and the worker's peak memory stays within
300 MB of its size before the upload (the review saw a 2.3 MB DOCX take a worker from 265 MB to 3,027 MB)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.conversion_bombs import pdf_bomb, xlsx_bomb, zip_bomb_docx
from tests.support.live_server import worker_pids
from tests.support.sample_files import docx_bytes
from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration

MB = 1024 * 1024
MEMORY_LIMIT_MB = 256
WORKER_GROWTH_LIMIT_KB = 300 * 1024


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {"DOCQA_CONVERT_MAX_MEMORY_MB": str(MEMORY_LIMIT_MB)}
    with server_stack(tmp_path_factory.mktemp("bombs"), workers=1, extra_env=env) as running:
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=300) as http:
        # A normal DOCX first: the worker has loaded the ingestion path (the embedder included) before it is
        # measured, and a DOCX still ingests through the box.
        report = _upload(http, stack, "normal.docx", docx_bytes(["Travel must be approved by a manager."] * 20))
        assert report["items_written"] == 1, report
        yield http


def _upload(client: httpx.Client, stack: Stack, name: str, data: bytes) -> dict:
    created = client.post(
        "/v1/documents",
        headers=stack.auth("root"),
        data={"access": ["everyone"]},
        files=[("files", (name, data, "application/octet-stream"))],
    )
    assert created.status_code == 202, created.text
    report = client.get(f"/v1/jobs/{created.json()['job_id']}", headers=stack.auth("root"))
    assert report.status_code == 200, report.text
    return report.json()


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.parametrize(
    "name,build,code,reason",
    [
        (
            "bomb.docx",
            zip_bomb_docx,
            "file_too_large",
            r"decompressed size over 67108864 bytes \(word/document\.xml declares 230\d{6} bytes\)",
        ),
        # Within every declared bound: the child's memory limit stops python-docx's tree for 60 MB of XML.
        (
            "big.docx",
            lambda: zip_bomb_docx(60 * MB),
            "file_too_large",
            f"conversion used more than {MEMORY_LIMIT_MB} MB",
        ),
        # pypdf stops inflating at its own 75 MB output limit, inside the child.
        ("bomb.pdf", pdf_bomb, "unreadable_file", r"cannot parse PDF file \(.*"),
        (
            "bomb.xlsx",
            xlsx_bomb,
            "file_too_large",
            r"decompressed size over 67108864 bytes \(xl/worksheets/sheet1\.xml declares 230\d{6} bytes\)",
        ),
    ],
)
def test_a_hostile_upload_is_a_failed_item_and_the_worker_stays_small(client, stack, name, build, code, reason):
    data = build()
    [worker] = worker_pids(stack.server.pid)
    before_kb = _status_kb(worker, "VmRSS")
    # Resets the worker's peak RSS (VmHWM) to its current size: what follows is the upload's own peak.
    Path(f"/proc/{worker}/clear_refs").write_text("5")
    report = _upload(client, stack, name, data)
    growth_kb = _status_kb(worker, "VmHWM") - before_kb
    assert report["items_failed"] == 1, report
    [failure] = report["failures"]
    assert failure["code"] == code
    assert re.fullmatch(reason, failure["reason"]), failure["reason"]
    assert growth_kb < WORKER_GROWTH_LIMIT_KB, f"worker grew {growth_kb // 1024} MB"
    assert worker_pids(stack.server.pid) == [worker]
