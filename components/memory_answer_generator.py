"""ReSP's generator: answers the question from the two memories, never from the raw documents."""

from __future__ import annotations

from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.resp_memory import ReSPMemory
from docqa.llm.calls import ChatGenerator, generate_reply, strip_prompt_echo


@component
class MemoryAnswerGenerator:
    """
    Generates a short answer from ReSP's global evidence and local pathway memories.

    The prompt asks for the answer only; the reply is reduced to its first non-empty line without an
    "Answer:" label, skipping echoed "Question:" lines, because short-answer scoring (EM/F1) and users both
    want the answer, not a preamble.

    Usage example:
    ```python
    generator = MemoryAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    generator.run(question="Where was the director of Jaws born?", memory=memory)["answer"]
    ```
    """

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_tokens: int = 48) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "generator" role in docqa.
        :param prompt_template: Jinja2 template with `question` and `memory`; the packaged one by default.
        :param max_tokens: Token cap of the answer.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("resp_generate")
        self.max_tokens = max_tokens

    def prompt_for(self, question: str, memory: ReSPMemory) -> str:
        """The exact prompt `run` sends (used to count the words passed to the generator)."""
        return render_prompt(self.prompt_template, question=question, memory=memory.as_text())

    @component.output_types(answer=str, finish_reason=str | None)
    def run(self, question: str, memory: ReSPMemory) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param memory: Both memory queues.
        :returns: `answer`, possibly empty when the model says nothing, and the model's `finish_reason` for it
            ("length" when the token limit cut it).
        """
        prompt = self.prompt_for(question, memory)
        raw, finish_reason = generate_reply(self.chat_generator, prompt, max_tokens=self.max_tokens,
                                            purpose="resp_generate")
        lines = strip_prompt_echo(raw, prompt).splitlines()
        # Only the first line is the answer: a limit that cut a later line did not cut it.
        return {"answer": lines[0] if lines else "", "finish_reason": finish_reason if len(lines) <= 1 else "stop"}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            prompt_template=self.prompt_template,
            max_tokens=self.max_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryAnswerGenerator:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
