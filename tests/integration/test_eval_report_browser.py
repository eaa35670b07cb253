"""`docqa eval`'s report.html in a real browser (Debian's chromium driven by playwright): it opens from the file
alone, asks no other host for anything, and shows the summary table and every plot. A screenshot is kept as a
test artifact (in DOCQA_TEST_ARTIFACTS when set, else the test's tmp dir).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from docqa.evaluation.report import write_reports
from docqa.evaluation.runner import EvalRecord

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _records() -> list[EvalRecord]:
    records = []
    for i in range(6):
        for pipeline, right in (("standard", i % 2 == 0), ("resp", i % 3 != 0)):
            records.append(EvalRecord(
                pipeline, f"q{i}", f"Question <b>{i}</b>?", ["Paris"], prediction="Paris" if right else "Lyon",
                em=float(right), f1=float(right), rouge_l=float(right), support_recall=0.5, llm_calls=1 + i % 3,
                iterations=1, wall_s=1.0 + i, stop_reason="done", trace_id=f"trace-{pipeline}-{i}"))
    return records


def test_report_opens_offline_and_shows_table_and_plots(tmp_path: Path) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    out = tmp_path / "run"
    out.mkdir()
    write_reports(out, _records())
    artifacts = Path(os.environ.get("DOCQA_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)

    requested: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda request: requested.append(request.url))
            page.goto((out / "report.html").as_uri())
            page.wait_for_load_state("load")
            rows = page.locator("#summary tbody tr")
            assert rows.count() == 2
            assert rows.nth(0).locator("td").nth(0).inner_text() == "standard"
            assert rows.nth(0).locator("td").nth(3).inner_text() == "50.0"  # F1 in percent: 3 of 6 right
            widths = page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
            assert len(widths) == 3 and all(w > 0 for w in widths)
            # The question's markup is shown as text, not rendered.
            assert page.locator("#worst b").count() == 0 and "<b>" in page.locator("#worst").inner_text()
            page.screenshot(path=str(artifacts / "eval-report.png"), full_page=True)
        finally:
            browser.close()
    assert [u for u in requested if not u.startswith(("file://", "data:"))] == []
    assert (artifacts / "eval-report.png").stat().st_size > 10_000
