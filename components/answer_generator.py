"""Answer a question from the model alone: the no-retrieval baseline's only component."""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_reply, strip_prompt_echo


@component
class AnswerGenerator:
    """
    Renders a question into a prompt and returns the model's answer (no documents, no citations).

    Usage example:
    ```python
    generator = AnswerGenerator(chat_generator=OpenAIChatGenerator(...), max_tokens=64)
    generator.run(question="What is the capital of France?")["answer"]
    ```
    """

    step_kind = "generation"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_tokens: int = 256) -> None:
        """
        :param chat_generator: Any Haystack chat generator (OpenAI-compatible in production).
        :param prompt_template: Jinja2 template with `question`; the packaged no-retrieval prompt by default.
        :param max_tokens: Upper bound on the answer length in tokens.
        :raises ValueError: `max_tokens` below 1.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("no_retrieval_answer")
        self.max_tokens = max_tokens

    @component.output_types(answer=str, finish_reason=str | None)
    def run(self, question: str) -> dict[str, Any]:
        """
        :param question: The user's question.
        :returns: `answer`, the model's stripped reply, and its `finish_reason` ("length" when cut by the limit).
        """
        prompt = render_prompt(self.prompt_template, question=question)
        reply, finish_reason = generate_reply(self.chat_generator, prompt, max_tokens=self.max_tokens,
                                              purpose="answer")
        return {"answer": strip_prompt_echo(reply, prompt), "finish_reason": finish_reason}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            prompt_template=self.prompt_template,
            max_tokens=self.max_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnswerGenerator:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
