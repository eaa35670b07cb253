"""Answer a question from the model alone: the no-retrieval baseline's only component."""

from __future__ import annotations

from typing import Any

from haystack import component

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import TextReplyParser


@component
class AnswerGenerator(PromptedLLM):
    """
    Renders a question into a prompt and returns the model's answer (no documents, no citations): a
    `ChatPromptBuilder` -> `ConstrainedGeneration` -> `TextReplyParser` step.

    Usage example:
    ```python
    generator = AnswerGenerator(chat_generator=OpenAIChatGenerator(...), max_tokens=64)
    generator.run(question="What is the capital of France?")["answer"]
    ```
    """

    step_kind = "generation"

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 256) -> None:
        """
        :param chat_generator: Any Haystack chat generator (a `RoleChatGenerator` in docqa's strategies).
        :param prompt_template: Jinja2 template with `question`; the packaged no-retrieval prompt by default.
        :param max_tokens: Upper bound on the answer length in tokens.
        :raises ValueError: `max_tokens` below 1.
        """
        template = prompt_template or load_prompt("no_retrieval_answer")
        PromptedLLM.__init__(
            self, chat_generator, template, TextReplyParser(), variables=["question"],
            outputs={"answer": "answer", "finish_reason": "finish_reason"}, max_tokens=max_tokens, purpose="answer",
            llm_kind="generation",
            init_parameters={"prompt_template": template, "max_tokens": max_tokens},
        )
