"""Answer a question from numbered documents and resolve the `[n]` references the model writes."""

from typing import Any

from haystack import component

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import CitedReplyParser


@component
class CitedAnswerGenerator(PromptedLLM):
    """
    Generates an answer grounded in the given documents and returns the documents it cited: a
    `ChatPromptBuilder` -> `ConstrainedGeneration` -> `CitedReplyParser` step.

    The prompt numbers the documents `[1]..[n]`; references the model writes are mapped back to documents.
    When the model cites nothing, the documents it was given are returned with `citation_mode="context"`,
    because the answer was generated from exactly those (small models rarely write references).

    Usage example:
    ```python
    generator = CitedAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    out = generator.run(question="Who wrote Hamlet?", documents=[Document(content="Hamlet is by Shakespeare.")])
    out["answer"], out["cited_documents"]
    ```
    """

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 256) -> None:
        """
        :param chat_generator: Any Haystack chat generator (a `RoleChatGenerator` in docqa's strategies).
        :param prompt_template: Jinja2 template with `question` and `documents`; the packaged one by default.
        :param max_tokens: Upper bound on the answer length in tokens.
        """
        template = prompt_template or load_prompt("standard_answer")
        PromptedLLM.__init__(
            self, chat_generator, template, CitedReplyParser(), variables=["question", "documents"],
            outputs={"answer": "answer", "cited_documents": "cited_documents", "citation_mode": "citation_mode",
                     "finish_reason": "finish_reason"},
            max_tokens=max_tokens, purpose="answer", llm_kind="generation",
            init_parameters={"prompt_template": template, "max_tokens": max_tokens},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param documents: Context documents, in the order they are numbered in the prompt.
        :returns: `answer` (empty when the model only repeated the prompt, or was not asked because there is no
            document), `cited_documents`, `citation_mode` ("explicit", "context" or "none") and the model's
            `finish_reason` ("length" when the token limit cut the reply).
        """
        if not kwargs.get("documents"):
            # Nothing to answer from: the model is not asked (the grounding check says no passage matched).
            return {"answer": "", "cited_documents": [], "citation_mode": "none", "finish_reason": None}
        return PromptedLLM.run(self, **kwargs)
