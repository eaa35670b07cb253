"""ReSP's reasoner as two prompted LLM steps: judge whether the memories answer the question; plan one next
sub-question (its reply read by `SubQuestionPlanParser`, then refused by a `SubQuestionGuard` if a repeat)."""

from __future__ import annotations

import re
from typing import Any

from haystack import component
from haystack.dataclasses import ChatMessage

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import YesNoReplyParser, reply_text
from docqa.components.sub_question_guard import SubQuestionGuard

# Labels small models echo from the prompt or invent ("[Your thought]:", "Sub-question 2:", "- ", "1. ").
_LEADING_LABEL = re.compile(
    r"^\s*(?:\[?\s*(?:your\s+)?(?:thought|question|sub-?question|next\s+question|query)\s*\d*\s*\]?\s*:|"
    r"[-*•]|\d+[.)])\s*",
    re.IGNORECASE,
)


@component
class ReSPJudge(PromptedLLM):
    """
    Judges from the memories alone whether they answer the question (ReSP's reasoner, first half): a
    `ChatPromptBuilder` (`question`, `memory`) -> constrained Yes/No call -> `YesNoReplyParser` step.

    An unreadable verdict counts as "not sufficient" (the loop is bounded by the controller's iteration limit, so
    this errs towards one more retrieval, never towards an endless loop).

    Usage example:
    ```python
    judge = ReSPJudge(chat_generator=OpenAIChatGenerator(...))
    judge.run(question="Where was the director of Jaws born?", memory=memory)["sufficient"]
    ```
    """

    step_kind = "judgement"

    def __init__(self, chat_generator: Any, judge_template: str | None = None) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "reasoner" role in docqa.
        :param judge_template: Jinja2 template with `question` and `memory`; the packaged one by default.
        """
        template = judge_template or load_prompt("resp_judge")
        self.judge_template = template
        PromptedLLM.__init__(
            self,
            chat_generator,
            template,
            YesNoReplyParser(),
            variables=["question", "memory"],
            outputs={"yes": "sufficient", "verdict": "verdict"},
            output="yes_no",
            purpose="resp_judge",
            init_parameters={"judge_template": template},
        )


@component
class SubQuestionPlanParser:
    """
    Reads a planned sub-question: one line cleaned of echoed labels and bounded in length. Whether it repeats an
    asked query is the next step's question (`SubQuestionGuard`, the planner's check; the prompt only asks).

    Usage example:
    ```python
    parser = SubQuestionPlanParser()
    parser.run(replies=[ChatMessage.from_assistant("[Your thought]: Who directed Jaws?")], question="...")
    ```
    """

    def __init__(self, max_sub_question_chars: int = 300) -> None:
        """
        :param max_sub_question_chars: Characters kept of a planned sub-question.
        """
        if max_sub_question_chars < 1:
            raise ValueError("max_sub_question_chars must be positive")
        self.max_sub_question_chars = max_sub_question_chars

    @component.output_types(candidate=str | None, asked=list[str])
    def run(
        self, replies: list[ChatMessage], question: str, asked: list[str] | None = None, attempt: int = 1
    ) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param question: The overarching question (the only asked query when `asked` is None).
        :param asked: Every query already retrieved for.
        :param attempt: 1-based attempt within the iteration (recorded in the step).
        :returns: The cleaned `candidate` (None when unusable) and the queries it must not repeat (`asked`).
        """
        return {
            "candidate": self._clean_plan(reply_text(replies)),
            "asked": list(asked) if asked is not None else [question],
        }

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


@component
class ReSPPlanner(PromptedLLM):
    """
    Plans the next sub-question from the memories and refuses one that repeats an asked one (ReSP's reasoner,
    second half): a `ChatPromptBuilder` (`question`, `memory`, `asked`, `rejected`) -> one text call ->
    `SubQuestionPlanParser` -> `SubQuestionGuard` step (its text check, embeddings and verdict steps of its own).

    A `rejected` plan from an earlier attempt is quoted back to the model. Whether to re-plan is the controller's
    decision, not the planner's.

    Usage example:
    ```python
    planner = ReSPPlanner(chat_generator=OpenAIChatGenerator(...), guard=SubQuestionGuard())
    out = planner.run(question="Where was the director of Jaws born?", memory=memory, asked=["..."],
                      rejected=None, attempt=1)
    out["accepted"], out["sub_question"], out["repeat_check"]
    ```
    """

    step_kind = "plan"

    def __init__(
        self,
        chat_generator: Any,
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
        template = plan_template or load_prompt("resp_plan")
        self.guard = guard or SubQuestionGuard()
        self.plan_template = template
        self.max_plan_tokens = max_plan_tokens
        self.max_sub_question_chars = max_sub_question_chars
        PromptedLLM.__init__(
            self,
            chat_generator,
            template,
            SubQuestionPlanParser(max_sub_question_chars),
            variables=["question", "memory", "asked", "rejected"],
            required_variables=["question", "memory"],
            check=self.guard,
            outputs={"candidate": "sub_question", "accepted": "accepted", "repeat_check": "repeat_check"},
            max_tokens=max_plan_tokens,
            purpose="resp_plan",
            init_parameters={
                "guard": self.guard,
                "plan_template": template,
                "max_plan_tokens": max_plan_tokens,
                "max_sub_question_chars": max_sub_question_chars,
            },
        )


def _clip_words(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    clipped = text[:max_chars].rsplit(" ", 1)[0]
    return clipped or text[:max_chars]
