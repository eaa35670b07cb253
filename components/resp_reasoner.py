"""ReSP's reasoner as two components: judge whether the memories answer the question; plan one next sub-question."""

from __future__ import annotations

import re
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace, deserialize_component_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.resp_memory import ReSPMemory
from docqa.components.sub_question_guard import SubQuestionGuard
from docqa.llm.calls import ChatGenerator, generate_text, generate_yes_no

# Labels small models echo from the prompt or invent ("[Your thought]:", "Sub-question 2:", "- ", "1. ").
_LEADING_LABEL = re.compile(
    r"^\s*(?:\[?\s*(?:your\s+)?(?:thought|question|sub-?question|next\s+question|query)\s*\d*\s*\]?\s*:|"
    r"[-*•]|\d+[.)])\s*",
    re.IGNORECASE,
)


@component
class ReSPJudge:
    """
    Judges from the memories alone whether they answer the question (ReSP's reasoner, first half).

    The judgement is a constrained Yes/No; an unreadable verdict counts as "not sufficient" (the loop is bounded
    by the controller's iteration limit, so this errs towards one more retrieval, never towards an endless loop).

    Usage example:
    ```python
    judge = ReSPJudge(chat_generator=OpenAIChatGenerator(...))
    judge.run(question="Where was the director of Jaws born?", memory=memory)["sufficient"]
    ```
    """

    step_kind = "judgement"

    def __init__(self, chat_generator: ChatGenerator, judge_template: str | None = None) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "reasoner" role in docqa.
        :param judge_template: Jinja2 template with `question` and `memory`; the packaged one by default.
        """
        self.chat_generator = chat_generator
        self.judge_template = judge_template or load_prompt("resp_judge")

    @component.output_types(sufficient=bool, verdict=str)
    def run(self, question: str, memory: ReSPMemory) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param memory: Both memory queues; the judge sees nothing else.
        :returns: `sufficient` (True only for a readable "yes") and the `verdict`: "yes", "no" or "unreadable".
        """
        prompt = render_prompt(self.judge_template, question=question, memory=memory.as_text())
        verdict = generate_yes_no(self.chat_generator, prompt, purpose="resp_judge")
        return {"sufficient": verdict is True, "verdict": {True: "yes", False: "no", None: "unreadable"}[verdict]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               judge_template=self.judge_template)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSPJudge:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)


@component
class ReSPPlanner:
    """
    Plans the next sub-question from the memories and refuses one that repeats an asked one (ReSP's reasoner,
    second half).

    The plan is one line of free text cleaned of echoed labels and bounded in length; `sub_question` is None when
    nothing usable remains. Repetition is checked in code by the `SubQuestionGuard` (the prompt only asks); a
    `rejected` plan from an earlier attempt is quoted back to the model. Whether to re-plan is the controller's
    decision, not the planner's.

    Usage example:
    ```python
    planner = ReSPPlanner(chat_generator=OpenAIChatGenerator(...), guard=SubQuestionGuard())
    out = planner.run(question="Where was the director of Jaws born?", memory=memory, asked=["..."])
    out["accepted"], out["sub_question"], out["repeat_check"]
    ```
    """

    step_kind = "plan"

    def __init__(
        self,
        chat_generator: ChatGenerator,
        guard: SubQuestionGuard | None = None,
        plan_template: str | None = None,
        max_plan_tokens: int = 48,
        max_sub_question_chars: int = 300,
    ) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "reasoner" role in docqa.
        :param guard: Refuses repeated sub-questions; a text-only guard by default.
        :param plan_template: Jinja2 template with `question`, `memory`, `asked` and `rejected`.
        :param max_plan_tokens: Token cap of a planned sub-question.
        :param max_sub_question_chars: Characters kept of a planned sub-question.
        """
        if max_plan_tokens < 1 or max_sub_question_chars < 1:
            raise ValueError("max_plan_tokens and max_sub_question_chars must be positive")
        self.chat_generator = chat_generator
        self.guard = guard or SubQuestionGuard()
        self.plan_template = plan_template or load_prompt("resp_plan")
        self.max_plan_tokens = max_plan_tokens
        self.max_sub_question_chars = max_sub_question_chars

    def warm_up(self) -> None:
        self.guard.warm_up()

    @component.output_types(sub_question=str | None, accepted=bool, repeat_check=dict[str, Any] | None)
    def run(
        self,
        question: str,
        memory: ReSPMemory,
        asked: list[str] | None = None,
        rejected: str | None = None,
        attempt: int = 1,
    ) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param memory: Both memory queues.
        :param asked: Every query already retrieved for; the question alone by default.
        :param rejected: A previous plan refused as a repeat, quoted back to the model when re-planning.
        :param attempt: 1-based attempt within the iteration (recorded in the step).
        :returns: The cleaned `sub_question` (None when unusable), whether it is `accepted` (usable and not a
            repeat) and the guard's `repeat_check` (None when there was nothing to check).
        """
        asked = list(asked) if asked is not None else [question]
        prompt = render_prompt(self.plan_template, question=question, memory=memory.as_text(), asked=asked,
                               rejected=rejected)
        raw = generate_text(self.chat_generator, prompt, max_tokens=self.max_plan_tokens, purpose="resp_plan")
        candidate = self._clean_plan(raw)
        if candidate is None:
            return {"sub_question": None, "accepted": False, "repeat_check": None}
        check = self.guard.run(candidate=candidate, asked=asked)
        return {"sub_question": candidate, "accepted": not check["repeated"], "repeat_check": check}

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
            guard=component_to_dict(self.guard, "guard"),
            plan_template=self.plan_template,
            max_plan_tokens=self.max_plan_tokens,
            max_sub_question_chars=self.max_sub_question_chars,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSPPlanner:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        if data["init_parameters"].get("guard") is not None:
            deserialize_component_inplace(data["init_parameters"], key="guard")
        return default_from_dict(cls, data)


def _clip_words(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    clipped = text[:max_chars].rsplit(" ", 1)[0]
    return clipped or text[:max_chars]
