"""A citation opened in context in a real browser (Debian's chromium driven by playwright) against the gunicorn
server stack: 'Show in context' shows the cited passage as its document holds it, and hides it again. A
screenshot is kept as a test artifact."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_web_ui import ask, browser, page, sign_in  # noqa: F401  (fixtures)
from tests.support.server_stack import QUESTION, Stack, server_stack

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with server_stack(tmp_path_factory.mktemp("web-ui-passage-context"), workers=1) as running:
        yield running


def test_a_citation_opens_its_passage_in_context(page, stack, tmp_path):  # noqa: F811
    sign_in(page, stack, "alice")
    ask(page, QUESTION, "standard")
    first = page.locator("#citations li").first
    snippet = (first.locator(".snippet").text_content() or "").strip()
    assert snippet
    first.get_by_role("button", name="Show in context").click()
    cited = first.locator(".passage-context .cited")
    cited.wait_for()
    assert snippet[:40] in (cited.text_content() or "")
    assert first.get_by_role("button", name="Hide context").get_attribute("aria-expanded") == "true"
    artifacts = Path(os.environ.get("DOCQA_TEST_ARTIFACTS", tmp_path))
    artifacts.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(artifacts / "passage-context.png"), full_page=True)
    first.get_by_role("button", name="Hide context").click()
    assert first.locator(".passage-context").is_hidden()
