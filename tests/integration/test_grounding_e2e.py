"""The grounding check with the packaged model: every answer shown is the model's checked text or quoted passages.

The 270M model answers badly; this checks the shape (a grounding step, a labelled answer), not correctness.
"""

from __future__ import annotations

from typing import Any

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder

pytestmark = pytest.mark.integration

TENANT = "grounding-e2e"
ALICE = AccessScope(TENANT, frozenset({"alice"}))
POLICIES = [
    ("hotel", "Hotel costs are reimbursed up to EUR 5,000 per year. The finance director, Jane Smith, approves "
              "any hotel cost above that limit."),
    ("meals", "Meals abroad are reimbursed with a daily allowance of 45 euros since March 2021."),
    ("laptops", "New employees receive a laptop on their first day. Laptops are replaced every 4 years."),
]


class HashRuntime(Runtime):
    def text_embedder(self) -> Any:
        return HashTextEmbedder()


@pytest.mark.parametrize("question", ["What is the yearly hotel limit?", "Who approves hotel costs above the limit?",
                                      "How much is the daily meal allowance abroad?"])
def test_the_shown_answer_is_the_checked_model_text_or_quoted_passages(local_llm_settings: Settings,
                                                                        question: str) -> None:
    # The same data directory, so the same local model server; a tenant of its own keeps other tests' passages out.
    runtime = HashRuntime(local_llm_settings.model_copy(update={"top_k": 2}))
    documents = [Document(id=f"{TENANT}-{i}", content=text,
                          meta={"tenant": TENANT, "access": ["everyone"], "source": f"{i}.md"}) for i, text in POLICIES]
    runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=documents)["documents"],
                                           policy=DuplicatePolicy.OVERWRITE)

    result = build_pipeline("standard", runtime).run(question, ALICE)

    grounding = [s for s in result.steps if s.kind == "grounding"]
    assert len(grounding) == 1 and grounding[0].outputs["verdicts"]
    assert {v["verdict"] for v in grounding[0].outputs["verdicts"]} <= {"kept", "dropped"}
    assert result.answer_source in ("model", "extracted", "none")
    if result.answer_source == "model":
        kept = [v["sentence"] for v in grounding[0].outputs["verdicts"] if v["verdict"] == "kept"]
        assert kept and result.answer
        dropped = [v for v in grounding[0].outputs["verdicts"] if v["verdict"] == "dropped"]
        assert bool(result.answer_note) == bool(dropped)
    else:
        assert result.answer_note and result.answer_note.startswith("No answer")
        reason = grounding[0].outputs["reason"]
        assert reason and (reason in result.answer_note or result.answer_source == "none"
                           or reason in ("empty", "echo", "repetitive"))
    cited = {c.document_id for c in result.citations}
    assert cited <= {f"{TENANT}-{i}" for i, _ in POLICIES}
