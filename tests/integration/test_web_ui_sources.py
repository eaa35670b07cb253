"""The sources status page in a real browser (Debian's chromium driven by playwright) against the gunicorn server
stack: an admin sees each source of the tenant with its last run (status, when, documents added / changed /
deleted / access changed / failed), its next run and its last error, starts a sync with 'Sync now' and sees the
new run's counts; another tenant's admin sees none of them. A screenshot is kept as a test artifact."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_web_ui import browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration

COLUMNS = [
    "source",
    "type",
    "documents",
    "last run",
    "finished",
    "added",
    "changed",
    "deleted",
    "access changed",
    "failed",
    "next run",
    "last error",
]


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("web-ui-sources") / "shares"


@pytest.fixture(scope="module")
def stack(shares: Path) -> Iterator[Stack]:
    handbook = shares / "handbook"
    handbook.mkdir(parents=True)
    (handbook / "travel.txt").write_text(
        "Travel policy. Trains are booked in second class for trips under four hours. " * 3
    )
    (handbook / "leave.txt").write_text("Leave policy. Employees get 30 days of paid leave per year. " * 3)
    (handbook / "offices.txt").write_text("Offices open at nine and close at six on weekdays. " * 3)
    with server_stack(shares.parent, workers=1, extra_env={"DOCQA_SOURCES_ROOTS": str(shares)}) as running:
        yield running


def _define(stack: Stack, body: dict[str, Any]) -> None:
    response = httpx.post(f"{stack.base_url}/v1/admin/sources", json=body, headers=stack.auth("root"), timeout=60)
    assert response.status_code == 201, response.text


def _sync_and_wait(stack: Stack, name: str) -> dict[str, Any]:
    """Start a sync over the API and wait for its run to finish; returns the source's status."""
    before = _status(stack, name)["last_finished_at"]
    started = httpx.post(f"{stack.base_url}/v1/admin/sources/{name}/sync", headers=stack.auth("root"), timeout=60)
    assert started.status_code == 202, started.text
    return _finished_after(stack, name, before)


def _status(stack: Stack, name: str) -> dict[str, Any]:
    response = httpx.get(f"{stack.base_url}/v1/admin/sources/{name}", headers=stack.auth("root"), timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def _finished_after(stack: Stack, name: str, before: str | None, timeout_s: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _status(stack, name)
        if status["last_finished_at"] not in (None, before) and not status["running"]:
            return status
        time.sleep(0.5)
    raise AssertionError(f"the sync of {name} did not finish within {timeout_s} s: {status}")


def _row(tab: Any, name: str) -> dict[str, str]:
    cells = tab.eval_on_selector_all(
        f'#sources-rows tr[data-source="{name}"] > *', "cells => cells.map(c => c.textContent.trim())"
    )
    return dict(zip(COLUMNS, cells, strict=False))


def _wait_for_row(tab: Any, name: str, column: str, text: str) -> None:
    index = COLUMNS.index(column) + 1
    tab.wait_for_function(
        "([name, index, text]) => { const cell = document.querySelector("
        '`#sources-rows tr[data-source="${name}"] > :nth-child(${index})`);'
        " return cell !== null && cell.textContent.trim() === text; }",
        arg=[name, index, text],
    )


def test_the_status_page_shows_each_sources_last_run_next_run_and_last_error(page, stack, shares, tmp_path):  # noqa: F811
    _define(
        stack,
        {
            "name": "handbook",
            "type": "folder",
            "path": str(shares / "handbook"),
            "allow": ["group:finance"],
            "every": "15m",
        },
    )
    _define(stack, {"name": "archive", "type": "folder", "path": str(shares / "archive"), "allow": ["everyone"]})
    first = _sync_and_wait(stack, "handbook")
    assert (first["last_status"], first["last_counts"]["added"]) == ("succeeded", 3)
    failed = _sync_and_wait(stack, "archive")  # its folder does not exist (an unmounted share)
    assert failed["last_status"] == "failed"

    sign_in(page, stack, "root")
    page.goto(f"{stack.base_url}/ui/sources.html")
    page.locator('#sources-rows tr[data-source="archive"]').wait_for()
    assert page.locator("#sources-table").is_visible() and page.locator("#sources-empty").is_hidden()
    handbook = _row(page, "handbook")
    assert (handbook["type"], handbook["documents"], handbook["last run"]) == ("folder", "3", "succeeded")
    assert (handbook["added"], handbook["changed"], handbook["deleted"], handbook["failed"]) == ("3", "0", "0", "0")
    assert handbook["finished"] not in ("", "–") and handbook["next run"] not in ("", "–")
    assert handbook["last error"] == ""
    archive = _row(page, "archive")
    assert (archive["last run"], archive["documents"], archive["next run"]) == ("failed", "0", "–")
    assert "does not exist" in archive["last error"] and str(shares / "archive") in archive["last error"]
    assert page.locator('#sources-rows tr[data-source="archive"] td.error').first.text_content() == "failed"

    # The share changes: one file edited, one deleted, one added, one that cannot be read (no text).
    handbook_dir = shares / "handbook"
    (handbook_dir / "travel.txt").write_text("Travel policy, revised: trains in first class over three hours. " * 3)
    (handbook_dir / "leave.txt").unlink()
    (handbook_dir / "parking.txt").write_text("Parking permits are renewed every January at the front desk. " * 3)
    (handbook_dir / "blank.txt").write_text("   ")
    before = _status(stack, "handbook")["last_finished_at"]
    page.locator('#sources-rows button[data-source="handbook"]').click()  # "Sync now"
    _finished_after(stack, "handbook", before)
    # The page shows the new run by itself (it refreshes every 10 seconds).
    _wait_for_row(page, "handbook", "failed", "1")
    handbook = _row(page, "handbook")
    assert (handbook["added"], handbook["changed"], handbook["deleted"], handbook["failed"]) == ("1", "1", "1", "1")
    # Documents docqa holds: the blank file, never stored, is a failure of the run, not a document.
    assert (handbook["last run"], handbook["documents"]) == ("completed_with_errors", "3")
    assert page.locator('#sources-rows button[data-source="handbook"]').is_enabled()
    artifacts = Path(os.environ.get("DOCQA_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(artifacts / "sources-status.png"), full_page=True)


def test_another_tenants_admin_sees_none_of_them(page, stack):  # noqa: F811
    sign_in(page, stack, "zadmin")
    page.goto(f"{stack.base_url}/ui/sources.html")
    page.locator("#sources-empty").wait_for()
    assert page.locator("#sources-table").is_hidden()
    assert page.locator("#sources-rows tr").count() == 0
