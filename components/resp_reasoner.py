"""ReSP's reasoner: judge whether the memories answer the question; if not, plan one next sub-question."""

from __future__ import annotations

import re
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.resp_memory import ReSPMemory
from docqa.llm.calls import ChatGenerator, generate_text, generate_yes_no

# Labels small models echo from the prompt or invent ("[Your thought]:", "Sub-question 2:", "- ", "1. ").
_LEADING_LABEL = re.compile(
    r"^\s*(?:\[?\s*(?:your\s+)?(?:thought|question|sub-?question|next\s+question|query)\s*\d*\s*\]?\s*:|"
    r"[-*•]|\d+[.)])\s*",
    re.IGNORECASE,
)


@component
class ReSPReasoner:
    """
    Judges sufficiency from the memories only, and plans the next sub-question when they fall short.

    The judgement is a constrained Yes/No; an unreadable verdict counts as "not sufficient" (the loop is bounded
    by the caller's iteration limit, so this errs towards one more retrieval, never towards an endless loop).
    The plan is one line of free text cleaned of echoed labels and bounded in length; `None` when nothing
    usable remains. Repetition is also checked in code by `SubQuestionGuard`; the prompt only asks.

    Usage example:
    ```python
    reasoner = ReSPReasoner(chat_generator=OpenAIChatGenerator(...))
    out = reasoner.run(question="Where was the director of Jaws born?", memory=memory, asked=["..."])
    out["sufficient"], out["sub_question"]
    ```
    """

    def __init__(
        self,
        chat_generator: ChatGenerator,
        judge_template: str | None = None,
        plan_template: str | None = None,
        max_plan_tokens: int = 48,
        max_sub_question_chars: int = 300,
    ) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "reasoner" role in docqa.
        :param judge_template: Jinja2 template with `question` and `memory`; the packaged one by default.
        :param plan_template: Jinja2 template with `question`, `memory`, `asked` and `rejected`.
        :param max_plan_tokens: Token cap of a planned sub-question.
        :param max_sub_question_chars: Characters kept of a planned sub-question.
        """
        if max_plan_tokens < 1 or max_sub_question_chars < 1:
            raise ValueError("max_plan_tokens and max_sub_question_chars must be positive")
        self.chat_generator = chat_generator
        self.judge_template = judge_template or load_prompt("resp_judge")
        self.plan_template = plan_template or load_prompt("resp_plan")
        self.max_plan_tokens = max_plan_tokens
        self.max_sub_question_chars = max_sub_question_chars

    def judge(self, question: str, memory: ReSPMemory) -> bool | None:
        """
        :param question: The overarching question.
        :param memory: Both memory queues; the judge sees nothing else.
        :returns: True (sufficient), False (not sufficient) or None (unreadable verdict).
        """
        prompt = render_prompt(self.judge_template, question=question, memory=memory.as_text())
        return generate_yes_no(self.chat_generator, prompt, purpose="resp_judge")

    def plan(self, question: str, memory: ReSPMemory, asked: list[str], rejected: str | None = None) -> str | None:
        """
        :param question: The overarching question.
        :param memory: Both memory queues.
        :param asked: Every query already retrieved for, the question included.
        :param rejected: A previous plan refused as a repeat, quoted back to the model when re-planning.
        :returns: One cleaned sub-question, or None when the reply holds no usable text.
        """
        prompt = render_prompt(self.plan_template, question=question, memory=memory.as_text(), asked=asked,
                               rejected=rejected)
        raw = generate_text(self.chat_generator, prompt, max_tokens=self.max_plan_tokens, purpose="resp_plan")
        return self._clean_plan(raw)

    @component.output_types(sufficient=bool, verdict=str, sub_question=str | None)
    def run(self, question: str, memory: ReSPMemory, asked: list[str] | None = None) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param memory: Both memory queues.
        :param asked: Queries already retrieved for; defaults to the question alone.
        :returns: `sufficient`, the raw `verdict` ("yes", "no" or "unreadable") and, when not sufficient,
            the planned `sub_question` (None if the plan was unusable).
        """
        verdict = self.judge(question, memory)
        label = {True: "yes", False: "no", None: "unreadable"}[verdict]
        if verdict is True:
            return {"sufficient": True, "verdict": label, "sub_question": None}
        sub_question = self.plan(question, memory, asked if asked is not None else [question])
        return {"sufficient": False, "verdict": label, "sub_question": sub_question}

    def _clean_plan(self, raw: str) -> str | None:
        for line in raw.splitlines():
            text = line.strip()
            # Strip nested labels such as "- Thought: ..." one at a time, boundedly.
            for _ in range(3):
                stripped = _LEADING_LABEL.sub("", text, count=1).strip()
                if stripped == text:
                    break
                text = stripped
            text = text.strip(" \"'`*")
            if len(re.findall(r"\w+", text)) >= 2:
                return _clip_words(text, self.max_sub_question_chars)
        return None

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            judge_template=self.judge_template,
            plan_template=self.plan_template,
            max_plan_tokens=self.max_plan_tokens,
            max_sub_question_chars=self.max_sub_question_chars,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSPReasoner:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)


def _clip_words(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    clipped = text[:max_chars].rsplit(" ", 1)[0]
    return clipped or text[:max_chars]
