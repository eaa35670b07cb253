"""LLM-as-judge scores of an evaluated answer: correctness, completeness and relevance, 0-10 each (AT-RAG style).

The judge is a separate model: the `judge` LLM role (`DOCQA_LLM_ROLES__JUDGE__BASE_URL` / `__MODEL` /
`__API_KEY`, falling back to the global `DOCQA_LLM_*` like every role), so answers are not only graded by the
model that wrote them. Its reply is constrained JSON with integer fields bounded to 0-10; a reply that is not
such an object (malformed, out of range, cut off) leaves the scores missing rather than guessing them.

Usage:
    judge = AnswerJudge(chat_generator=runtime.chat_generator("judge"))
    judge.run(question="Who painted The Night Watch?", answer="Rembrandt [1]", references=["Rembrandt"])
    # {"scores": {"correctness": 10, "completeness": 10, "relevance": 10}} or {"scores": None}
"""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_json
from docqa.settings import JUDGE_ROLE

__all__ = ["JUDGE_ROLE", "AnswerJudge", "checked_scores"]

CRITERIA = ("correctness", "completeness", "relevance")
MAX_SCORE = 10
# Prompt bounds: long-form references (ODSum summaries) and rambling answers would otherwise fill the context.
MAX_REFERENCES = 4
MAX_TEXT_CHARS = 2000
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {c: {"type": "integer", "minimum": 0, "maximum": MAX_SCORE} for c in CRITERIA},
    "required": list(CRITERIA),
    "additionalProperties": False,
}


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " ..."


def checked_scores(data: dict[str, Any] | None) -> dict[str, int] | None:
    """The three scores when every one is an integer in 0-10 (a server without schema support may not obey)."""
    if data is None:
        return None
    scores = {}
    for criterion in CRITERIA:
        value = data.get(criterion)
        # bool is an int subclass; a whole float such as 7.0 is the same score.
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            return None
        if not 0 <= value <= MAX_SCORE:
            return None
        scores[criterion] = int(value)
    return scores


@component
class AnswerJudge:
    """
    Grades one answer against the reference answers with a judge model; `scores` is None when the judge's
    reply is unusable.

    Usage example:
    ```python
    judge = AnswerJudge(chat_generator=OpenAIChatGenerator(model="judge-model"))
    judge.run(question="...", answer="...", references=["..."])["scores"]  # {"correctness": 7, ...} or None
    ```
    """

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None, max_tokens: int = 64) -> None:
        """
        :param chat_generator: any Haystack chat generator (the `judge` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `answer`, `references`).
        :param max_tokens: bound on the JSON reply (three small integers need few tokens).
        """
        if max_tokens < 16:
            raise ValueError("max_tokens must be at least 16")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("eval_judge")
        self.max_tokens = max_tokens

    @component.output_types(scores=dict[str, int] | None)
    def run(self, question: str, answer: str, references: list[str]) -> dict[str, Any]:
        """
        :param question: the question asked.
        :param answer: the strategy's answer.
        :param references: the dataset's reference answers (the first MAX_REFERENCES are shown).
        :returns: `scores`, the three 0-10 scores, or None for an unusable reply.
        """
        prompt = render_prompt(self.prompt_template, question=_clip(question), answer=_clip(answer) or "(no answer)",
                               references=[_clip(r) for r in references[:MAX_REFERENCES]] or ["(none given)"])
        data = generate_json(self.chat_generator, prompt, JUDGE_SCHEMA, name="judge", max_tokens=self.max_tokens,
                             purpose="eval_judge")
        return {"scores": checked_scores(data)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               prompt_template=self.prompt_template, max_tokens=self.max_tokens)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerJudge:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
