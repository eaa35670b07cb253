"""The web UI in a real browser (Debian's chromium driven by playwright) against the gunicorn server stack:
a user asks and reads the cited answer, an admin uploads, follows the job and deletes a document, an auditor
opens the trace and verifies the chain, roles only see their views, and a hostile document is shown as text.

The tests of this module run in order: the upload test writes the hostile document the next test asks about.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.server_stack import ALL_MARKERS, QUESTION, Stack, readable_markers, server_stack

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 120_000

HOSTILE_NAME = "harbor-lantern.txt"
HOSTILE_MARKUP = '<img src=x onerror="window.__pwned=1">'
HOSTILE_TEXT = f"Harbor lantern memo. The harbor lantern signal is {HOSTILE_MARKUP} for every harbor lantern."
HOSTILE_QUESTION = "What is the harbor lantern signal of the harbor lantern memo?"

asked: dict[str, str] = {}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with server_stack(tmp_path_factory.mktemp("web-ui")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y --no-install-recommends chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab (own sessionStorage); fails the test on any script error or console error (CSP included)."""
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on("console", lambda message: problems.append(f"console: {message.text} {message.location.get('url')}")
           if message.type == "error" else None)
    yield tab
    context.close()
    # A 401 of a rejected key is logged by the browser as a failed resource load, which is expected there.
    assert [p for p in problems if "401" not in p] == []


def sign_in(page: Any, stack: Stack, user: str) -> None:
    page.goto(f"{stack.base_url}/")
    page.fill("#api-key", stack.keys[user])
    page.click("#signin-form button")
    page.wait_for_function("(user) => document.querySelector('#whoami').textContent.startsWith(user)", arg=user)
    assert page.url == f"{stack.base_url}/ui/"
    assert page.evaluate("sessionStorage.getItem('docqa.apiKey')") == stack.keys[user]


def visible_tabs(page: Any) -> set[str]:
    return set(page.eval_on_selector_all("#tabs button:not([hidden])", "buttons => buttons.map(b => b.dataset.view)"))


def ask(page: Any, question: str, pipeline: str) -> str:
    """Ask through the form; returns the trace id the page shows."""
    page.wait_for_selector(f"#pipeline option[value='{pipeline}']", state="attached")
    page.select_option("#pipeline", pipeline)
    page.fill("#question", question)
    page.click("#ask-button")
    page.wait_for_selector("#answer:not([hidden])")
    return page.text_content("#trace-id") or ""


def test_user_asks_and_reads_the_cited_answer(page, stack, tmp_path):
    sign_in(page, stack, "alice")
    assert visible_tabs(page) == {"ask"}
    assert page.locator("#documents-view, #traces-view").count() == 0
    page.wait_for_selector("#pipeline option[value='auto']", state="attached")
    options = page.eval_on_selector_all("#pipeline option", "options => options.map(o => o.value)")
    assert {"auto", "standard"} <= set(options)

    trace_id = ask(page, QUESTION, "standard")
    assert re.fullmatch(r"[0-9a-f-]{16,}", trace_id), trace_id
    assert page.locator("#steps li").count() >= 1
    assert page.text_content("#ask-status") == "Done."
    assert (page.text_content("#answer-text") or "").startswith("Scripted answer.")
    citations = page.inner_text("#citations")
    seen = {marker for marker in ALL_MARKERS if marker in citations}
    assert seen and seen <= readable_markers("alice"), seen
    assert stack.keys["alice"] not in page.url
    asked["alice"] = trace_id

    # Thumbs up with a comment, stored against the trace (the auditor test reads it back).
    page.fill("#feedback-comment", "Found it in the policy.")
    page.click("#feedback-form button[value='up']")
    page.wait_for_function("() => document.querySelector('#feedback-status').textContent.startsWith('Thanks')")
    assert page.text_content("#feedback-status") == "Thanks: marked helpful."
    artifacts = Path(os.environ.get("DOCQA_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(artifacts / "answer-feedback.png"), full_page=True)


def test_admin_uploads_sees_the_job_finish_and_deletes(page, stack):
    sign_in(page, stack, "root")
    assert visible_tabs(page) == {"ask", "documents"}
    assert page.locator("#traces-view").count() == 0
    page.click("#tabs button[data-view='documents']")
    page.wait_for_selector("#documents tbody tr[data-source='quillfeather.txt']")

    page.set_input_files("#upload-files", files=[
        {"name": HOSTILE_NAME, "mimeType": "text/plain", "buffer": HOSTILE_TEXT.encode()}])
    page.fill("#upload-access", "everyone")
    page.click("#upload-button")
    page.wait_for_function("() => ['succeeded', 'completed_with_errors'].includes("
                           "document.querySelector('#job-status').textContent)")
    assert page.text_content("#job-status") == "succeeded", page.inner_text("#job")
    assert (page.text_content("#job-counts") or "").startswith("1/1 files done: 1 written")
    row = page.locator(f"#documents tbody tr[data-source='{HOSTILE_NAME}']")
    row.wait_for()
    assert "everyone" in row.inner_text()

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#documents tbody tr[data-source='velvetanchor.txt'] button").click()
    page.locator("#documents tbody tr[data-source='velvetanchor.txt']").wait_for(state="detached")
    assert page.locator(f"#documents tbody tr[data-source='{HOSTILE_NAME}']").count() == 1


def test_hostile_document_content_is_shown_as_text(page, stack):
    sign_in(page, stack, "alice")
    ask(page, HOSTILE_QUESTION, "standard")
    snippets = page.locator("#citations .snippet").all_text_contents()
    assert any(HOSTILE_MARKUP in s for s in snippets), snippets
    assert page.locator("img").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_auditor_opens_the_trace_and_verifies_the_chain(page, stack):
    trace_id = asked.get("alice")
    assert trace_id, "needs the trace of test_user_asks_and_reads_the_cited_answer"
    sign_in(page, stack, "audrey")
    assert visible_tabs(page) == {"traces"}
    assert page.locator("#ask-view, #documents-view").count() == 0

    page.fill("#filter-user", "alice")
    page.fill("#filter-text", QUESTION[:20])
    page.click("#trace-filter button[type='submit']")
    # The unfiltered first page shows every trace; the filtered one only the first question's.
    page.wait_for_function("() => document.querySelectorAll('#traces tbody tr').length === 1")
    row = page.locator(f"#traces tbody tr[data-trace='{trace_id}']")
    assert row.count() == 1
    row.locator("button").click()
    page.wait_for_selector("#trace-detail:not([hidden])")
    assert page.text_content("#detail-id") == trace_id
    fields = page.inner_text("#detail-fields")
    assert "alice (acme)" in fields and "standard" in fields and "completed" in fields
    assert "thumbs up from alice: Found it in the policy." in fields

    steps = page.locator("#detail-steps details.step")
    assert steps.count() >= 2
    kinds = set(page.eval_on_selector_all("#detail-steps details.step", "nodes => nodes.map(n => n.dataset.kind)"))
    assert "retrieval" in kinds, kinds
    generation = page.locator("#detail-steps details.step:has(details.llm-call)").first
    generation.locator("summary").first.click()
    call = generation.locator("details.llm-call").first
    call.locator("summary").click()
    assert QUESTION in call.inner_text()  # the prompt sent to the LLM
    assert "Scripted answer." in call.inner_text()  # and its raw response

    page.click("#verify-chain")
    page.wait_for_function("() => /^Chain (verified|BROKEN)/.test("
                           "document.querySelector('#verify-result').textContent)")
    assert (page.text_content("#verify-result") or "").startswith("Chain verified: ")
    assert page.locator("img").count() == 0


def test_auditor_reads_events_and_asks_who_could_read_a_document(page, stack):
    sign_in(page, stack, "audrey")
    page.wait_for_selector("#events tbody tr")
    page.fill("#event-action", "document.")
    page.click("#event-filter button[type='submit']")
    deleted = page.locator("#events tbody tr", has_text="document:velvetanchor.txt")
    deleted.first.wait_for()
    assert "document.deleted" in deleted.first.inner_text() and "root" in deleted.first.inner_text()
    assert page.locator("#events tbody tr", has_text=f"document:{HOSTILE_NAME}").count() == 1

    page.fill("#access-principal", "group:finance")
    page.fill("#access-document", HOSTILE_NAME)
    page.fill("#access-at", "2100-01-01T00:00Z")
    page.click("#access-form button[type='submit']")
    page.wait_for_function("() => /^(YES|NO)/.test(document.querySelector('#access-result').textContent)")
    result = page.inner_text("#access-result")
    assert result.startswith("YES") and "document.ingested" in result, result

    page.fill("#access-document", "velvetanchor.txt")
    page.click("#access-form button[type='submit']")
    page.wait_for_function("() => /^NO/.test(document.querySelector('#access-result').textContent)")
    assert "document.deleted" in page.inner_text("#access-result")
    assert page.locator("img").count() == 0


def test_a_model_answer_trimmed_by_the_grounding_check_shows_what_was_removed(page, stack):
    """The server's answer (a model answer whose unsupported sentence the grounding check removed) is routed in
    as the stream's result: the page shows the kept text as the model's, with the check's note beside it."""
    note = ("Parts of the model's answer were removed (unsupported_number): only sentences supported by the "
            "passages are shown.")
    result = {"answer": "Hotels are reimbursed up to the limit [1].", "answer_source": "model", "answer_note": note,
              "pipeline": "standard", "trace_id": "0123456789abcdef0123", "citations": [], "steps": []}
    stream = f"event: result\ndata: {json.dumps(result)}\n\n"
    page.route("**/v1/query", lambda route: route.fulfill(
        status=200, headers={"Content-Type": "text/event-stream"}, body=stream))
    sign_in(page, stack, "alice")
    ask(page, "What is the hotel limit?", "standard")
    assert page.text_content("#answer-text") == result["answer"]
    assert page.is_visible("#answer-note") and page.text_content("#answer-note") == note
    assert "extracted" not in (page.get_attribute("#answer-text", "class") or "")


def test_a_rejected_key_shows_the_api_error_and_stays_signed_out(page, stack):
    page.goto(f"{stack.base_url}/ui/")
    page.fill("#api-key", "dq_0000000000000000_notakey")
    page.click("#signin-form button")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error") == "invalid or revoked API key (unauthorized)"
    assert page.is_visible("#signin-view")
    assert page.evaluate("sessionStorage.getItem('docqa.apiKey')") is None


FHIR_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "records" / "synthea_fhir_r4"


def test_user_reads_a_record_table_and_its_trend_chart(page, stack):
    import httpx

    bundles = sorted(FHIR_DIR.glob("*.json"), key=lambda p: p.stat().st_size)
    if not bundles:
        pytest.skip(f"shared Synthea data not found at {FHIR_DIR}")
    with bundles[0].open("rb") as handle:
        uploaded = httpx.post(f"{stack.base_url}/v1/records", headers=stack.auth("root"), timeout=120,
                              files={"bundle": (bundles[0].name, handle, "application/json")},
                              data={"access": ["group:finance"]})
    assert uploaded.status_code == 200, uploaded.text
    patient = uploaded.json()["patient_id"]
    sign_in(page, stack, "alice")
    page.wait_for_selector("#pipeline option[value='atrag']", state="attached")
    page.select_option("#pipeline", "atrag")
    page.fill("#patient-id", patient)
    page.fill("#as-of", "2030-01-01")
    ask(page, "Body weight since 1900", "atrag")
    rows = page.locator("#record-table tbody tr")
    assert rows.count() == 4
    assert "Body Weight" in (rows.first.text_content() or "")
    assert page.locator("#trend-chart:not([hidden]) circle").count() == 4
