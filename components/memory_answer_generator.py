"""ReSP's generator: answers the question from the two memories, never from the raw documents."""

from __future__ import annotations

from typing import Any

from haystack import component

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import TextReplyParser


@component
class MemoryAnswerGenerator(PromptedLLM):
    """
    Generates a short answer from ReSP's global evidence and local pathway memories: a `ChatPromptBuilder`
    (`question`, `memory`) -> `ConstrainedGeneration` -> `TextReplyParser(first_line=True)` step.

    The prompt asks for the answer only; the reply is reduced to its first non-empty line without an
    "Answer:" label, skipping echoed "Question:" lines, because short-answer scoring (EM/F1) and users both
    want the answer, not a preamble.

    Usage example:
    ```python
    generator = MemoryAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    generator.run(question="Where was the director of Jaws born?", memory=memory)["answer"]
    ```
    """

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 48) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "generator" role in docqa.
        :param prompt_template: Jinja2 template with `question` and `memory`; the packaged one by default.
        :param max_tokens: Token cap of the answer.
        """
        template = prompt_template or load_prompt("resp_generate")
        PromptedLLM.__init__(
            self, chat_generator, template, TextReplyParser(first_line=True), variables=["question", "memory"],
            outputs={"answer": "answer", "finish_reason": "finish_reason"}, max_tokens=max_tokens,
            purpose="resp_generate", llm_kind="generation",
            init_parameters={"prompt_template": template, "max_tokens": max_tokens},
        )
