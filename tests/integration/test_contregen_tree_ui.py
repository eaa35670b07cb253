"""The trace page draws a ConTReGen run as a tree in a real browser (Debian's chromium driven by playwright).

A scripted contregen run is recorded as an audit trace and read back as the API serves it; the page's own
`stepTree` (server/static/traces.js) draws it: node steps nest under their parent node, accepted and rejected
branches carry different classes and verdicts. A screenshot is written for a human to look at.
"""

from __future__ import annotations

import json
import shutil
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from docqa.access import AccessScope
from docqa.components.contre_tree_expander import ConTReTreeExpander
from docqa.components.contregen_synthesizer import ConTReGenSynthesizer
from docqa.pipelines.contregen import ConTReGenPipeline
from docqa.settings import Settings
from tests.support.resp_fakes import KeywordRetriever, doc
from tests.support.scripted_chat import ScriptedChatGenerator

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
STATIC = Path(__file__).resolve().parents[2] / "server" / "static"
QUESTION = "What happened to the harbour town during the storm?"
HARNESS = """<!doctype html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="app.css"></head>
<body><ol id="detail-steps" class="tree"></ol><script type="module" src="harness.js"></script></body></html>
"""
HARNESS_JS = """import { stepTree } from "./traces.js";
const steps = await (await fetch("trace.json")).json().then((trace) => trace.steps);
document.getElementById("detail-steps").append(...stepTree(steps));
for (const details of document.querySelectorAll("details")) details.open = true;
document.body.dataset.ready = "1";
"""


def _trace(tmp_path: Path) -> dict:
    from docqa.audit.recorder import TraceRecord, audit_session, record_answer
    from docqa.server.trace_queries import read_trace

    llm = ScriptedChatGenerator(rules=[
        (r"You plan the research", '{"sub_questions": ["How were the boats wrecked?", "What was the forecast?"]}'),
        (r"Decide whether.*Sub-question: How were", '{"needed": "Yes", "query": "boats wrecked by the storm"}'),
        (r"Decide whether", '{"needed": "No", "query": ""}'),
        (r"Which of the numbered passages", '{"relevant": [1]}'),
        (r"Summarise what", "Storm waves wrecked the boats [2]."),
    ], default="The storm flooded the docks [1] and wrecked the boats [2].")
    retriever = KeywordRetriever([
        doc("storm", "The storm hit the harbour town at night and flooded the docks.", "Storm"),
        doc("boats", "Fishing boats were wrecked by the storm waves.", "Boats"),
    ], top_k=1)
    strategy = ConTReGenPipeline(retriever, ConTReTreeExpander(llm, max_depth=1), ConTReGenSynthesizer(llm), top_k=1,
                                 max_question_chars=500)
    scope = AccessScope("acme", frozenset({"alice"}))
    result = strategy.run(QUESTION, scope)
    settings = Settings(data_dir=tmp_path / "data")
    trace_id = record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question=QUESTION,
                                                   pipeline="contregen", models={}, result=result))
    with audit_session(settings) as session:
        trace = read_trace(session, "acme", trace_id)
    assert trace is not None
    return trace


@pytest.fixture
def site(tmp_path: Path):
    root = tmp_path / "site"
    shutil.copytree(STATIC, root)
    (root / "harness.html").write_text(HARNESS, encoding="utf-8")
    (root / "harness.js").write_text(HARNESS_JS, encoding="utf-8")
    (root / "trace.json").write_text(json.dumps(_trace(tmp_path), default=str), encoding="utf-8")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_trace_page_draws_accepted_and_rejected_branches_as_a_tree(site: str, tmp_path: Path) -> None:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{site}/harness.html")
            page.wait_for_selector("body[data-ready='1']", timeout=30_000)

            accepted = page.locator("details.tree-node.accepted")
            rejected = page.locator("details.tree-node.rejected")
            assert accepted.count() == 2 and rejected.count() == 1
            assert "✗ rejected not needed: What was the forecast?" in rejected.locator(":scope > summary").inner_text()
            # Both sub-questions sit in the list under the root node's step, which sits under the expander's.
            parents = page.eval_on_selector_all(
                "details.tree-node", "nodes => nodes.map(n => n.closest('li').parentElement.closest('li')"
                ".querySelector(':scope > details > summary').textContent)")
            assert "contre_node 0 " in parents[1] and "contre_node 0 " in parents[2]
            assert "tree_expansion" in parents[0]
            # Visibly different: the stylesheet edges accepted nodes in green, rejected ones dashed in red.
            styles = page.eval_on_selector_all(
                "details.tree-node", "nodes => nodes.map(n => getComputedStyle(n).borderLeftStyle)")
            assert styles == ["solid", "solid", "dashed"]
            shot = tmp_path / "contregen-trace-tree.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 1000
            assert errors == []
        finally:
            browser.close()
