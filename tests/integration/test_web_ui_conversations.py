"""The ask page in a real browser (Debian's chromium driven by playwright) against the gunicorn server stack:
a user asks, sees the answer arrive token by token and each step's substance on a timeline, asks a follow-up in
the same stored conversation (the rewrite is a step of the timeline), reopens the conversation from the list and
deletes it; another user cannot read it. Screenshots are kept as test artifacts."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_web_ui import ask, browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.server_stack import QUESTION, Stack, server_stack

pytestmark = pytest.mark.integration

FOLLOW_UP = "and who wrote it?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with server_stack(tmp_path_factory.mktemp("web-ui-conversations"), workers=1) as running:
        yield running


def _artifacts(tmp_path: Path) -> Path:
    artifacts = Path(os.environ.get("DOCQA_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    return artifacts


def _substance(tab: Any, kind: str) -> str:
    return tab.inner_text(f"#steps li[data-kind='{kind}'] .substance")


def test_a_conversation_streams_shows_its_reasoning_and_is_reopened_and_deleted(page, stack, tmp_path):  # noqa: F811
    sign_in(page, stack, "alice")
    page.wait_for_selector("#conversations li")
    assert page.inner_text("#conversations") == "No conversations yet."

    ask(page, QUESTION, "standard")
    # The answer reached the live preview as token events; a line shorter than the echo holdback (which keeps a
    # line until it proves not to repeat the prompt) arrives as one event.
    assert int(page.get_attribute("#live-answer", "data-tokens") or 0) >= 1
    assert page.is_hidden("#live")
    assert (page.text_content("#answer-text") or "").startswith("Scripted answer.")
    retrieval = _substance(page, "retrieval")
    assert f"Query\n{QUESTION}" in retrieval and "Found" in retrieval and "Passage" in retrieval
    assert "Answer" in _substance(page, "generation")
    page.wait_for_selector("#conversations li[data-id]")
    assert page.inner_text("#conversations button[data-action='open']") == QUESTION
    assert page.locator("#conversation-turns li").count() == 1

    ask(page, FOLLOW_UP, "standard")
    rewrite = _substance(page, "rewrite")
    assert f"Asked\n{FOLLOW_UP}" in rewrite
    assert "Who wrote it? (regarding: What is the code word of the quarterly policy report)" in rewrite
    assert page.locator("#conversation-turns li").count() == 2
    assert page.locator("#conversations li[data-id]").count() == 1
    artifacts = _artifacts(tmp_path)
    page.screenshot(path=str(artifacts / "conversation-timeline.png"), full_page=True)

    conversation_id = page.get_attribute("#conversations li[data-id]", "data-id")
    assert httpx.get(f"{stack.base_url}/v1/conversations/{conversation_id}", headers=stack.auth("bob")
                     ).status_code == 404

    page.click("#new-conversation")
    assert page.locator("#conversation-turns li").count() == 0
    page.click("#conversations button[data-action='open']")
    page.wait_for_function("() => document.querySelectorAll('#conversation-turns li').length === 2")
    assert page.inner_text("#conversation-current") == f"Continuing: {QUESTION}"
    turns = page.inner_text("#conversation-turns")
    assert QUESTION in turns and FOLLOW_UP in turns and "asked as: Who wrote it?" in turns
    page.screenshot(path=str(artifacts / "conversation-reopened.png"), full_page=True)

    page.click("#conversations button[data-action='delete']")
    page.wait_for_function("() => document.querySelector('#conversations').textContent === 'No conversations yet.'")
    assert page.locator("#conversation-turns li").count() == 0
    assert httpx.get(f"{stack.base_url}/v1/conversations", headers=stack.auth("alice")).json() == {
        "conversations": []}


def test_an_iterative_strategy_shows_its_memories_and_judgement_on_the_timeline(page, stack, tmp_path):  # noqa: F811
    sign_in(page, stack, "alice")
    ask(page, QUESTION, "resp")
    assert f"Query\n{QUESTION}" in _substance(page, "retrieval")
    assert "Memory (global evidence)\nScripted answer." in _substance(page, "summary")
    # The scripted model's constrained replies take the first allowed value: the judge says it has enough.
    assert "Judgement\nenough information to answer" in _substance(page, "judgement")
    page.screenshot(path=str(_artifacts(tmp_path) / "resp-timeline.png"), full_page=True)


OFFSET = re.compile(r" · \+(?P<offset>[0-9.]+) s · ")


def test_a_follow_ups_trace_shows_its_rewrite_first_and_offsets_from_the_run_start(page, browser, stack,  # noqa: F811
                                                                                   tmp_path):
    # A rewrite step once made every other step's offset an epoch number ("+1795687855.995 s").
    sign_in(page, stack, "alice")
    ask(page, QUESTION, "standard")
    trace_id = ask(page, FOLLOW_UP, "standard")
    auditor = browser.new_page()
    try:
        sign_in(auditor, stack, "audrey")
        auditor.fill("#filter-user", "alice")
        auditor.fill("#filter-text", "who wrote")
        auditor.click("#trace-filter button[type='submit']")
        auditor.locator(f"#traces tbody tr[data-trace='{trace_id}'] button").click()
        auditor.wait_for_selector("#trace-detail:not([hidden])")
        assert auditor.text_content("#detail-id") == trace_id
        kinds = auditor.eval_on_selector_all("#detail-steps details.step", "nodes => nodes.map(n => n.dataset.kind)")
        assert kinds[0] == "rewrite", kinds
        summaries = auditor.eval_on_selector_all("#detail-steps details.step > summary",
                                                 "nodes => nodes.map(n => n.textContent)")
        offsets = [float(m.group("offset")) for m in map(OFFSET.search, summaries) if m]
        assert len(offsets) == len(summaries), summaries  # every step has an offset, none unknown ("–")
        assert offsets[0] == 0.0 and all(0 <= o < 600 for o in offsets), summaries
        assert offsets == sorted(offsets), summaries
        assert "everyone, group:finance, user:alice" in auditor.inner_text("#detail-fields")  # asked as
        auditor.screenshot(path=str(_artifacts(tmp_path) / "trace-after-follow-up.png"), full_page=True)
    finally:
        auditor.close()
