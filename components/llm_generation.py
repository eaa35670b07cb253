"""The generation node of a prompted LLM step: one bounded, recorded, constrained call of a role's model.

The call goes through `docqa.llm.calls`, so it keeps every guarantee of a model call in docqa: it counts against
the run's LLM call budget and prompt size bound, its token cap is checked, endpoint failures become
`LLMUnavailableError`, an answer streams to the asker, the prompt, reply and tokens are recorded on this node's
step, and structured output is sent as the endpoint accepts it (`json_schema`, else `json_object`, else
unconstrained and parsed defensively by the step's parser).

Usage:
    llm = ConstrainedGeneration(RoleChatGenerator("reasoner"), output="yes_no", purpose="resp_judge")
    llm.run(prompt=[ChatMessage.from_user("Is it sufficient? ...")])["replies"][0].text   # '{"answer": "No"}'
"""

from __future__ import annotations

from typing import Any, Literal

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.llm import calls

Output = Literal["text", "yes_no", "json"]
_DEFAULT_TOKENS = {"yes_no": 16, "json": 128}


@component
class ConstrainedGeneration:
    """
    Sends a rendered prompt to a chat generator once and returns its reply, constrained to `output`.

    Usage example:
    ```python
    llm = ConstrainedGeneration(RoleChatGenerator("generator"), max_tokens=64, purpose="answer")
    llm.run(prompt=ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{q}}")]).run(q="Hi?")["prompt"])
    ```
    """

    def __init__(self, chat_generator: Any, max_tokens: int | None = None, output: Output = "text",
                 schema: dict[str, Any] | None = None, schema_name: str = "output", purpose: str = "text") -> None:
        """
        :param chat_generator: the role's chat generator (a `RoleChatGenerator` in docqa's strategies).
        :param max_tokens: completion token cap; for `yes_no` 16 and for `json` 128 by default.
        :param output: "text" (free text), "yes_no" (a Yes/No verdict) or "json" (an object of `schema`).
        :param schema: the JSON schema of a "json" reply.
        :param schema_name: the schema's name as sent to the endpoint.
        :param purpose: what the call is for, recorded with it ("answer" and the like stream to the asker).
        :raises ValueError: a non-positive `max_tokens`, an unknown `output`, or "json" without a schema.
        """
        if max_tokens is not None and max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        if output not in ("text", "yes_no", "json"):
            raise ValueError(f"unknown output {output!r}; expected text, yes_no or json")
        if output == "json" and not schema:
            raise ValueError("a json output needs its schema")
        self.chat_generator = chat_generator
        self.max_tokens = max_tokens
        self.output = output
        self.schema = schema
        self.schema_name = schema_name
        self.purpose = purpose

    @component.output_types(replies=list[ChatMessage])
    def run(self, prompt: list[ChatMessage], schema: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param prompt: the rendered messages; their text is sent as one user message.
        :param schema: the JSON schema of this call's reply, instead of the one given at init (a step whose
            choices depend on the run, such as the actions an agent may take now).
        :returns: `replies`: one assistant message (its `finish_reason` in `meta` for a text reply).
        """
        text = "\n".join(message.text or "" for message in prompt).strip()
        meta: dict[str, Any] = {}
        if self.output == "text":
            reply, meta["finish_reason"] = calls.generate_reply(self.chat_generator, text, max_tokens=self.max_tokens,
                                                                purpose=self.purpose)
        elif self.output == "yes_no":
            reply = calls._structured(self.chat_generator, text, calls.YES_NO_SCHEMA, "yes_no",
                                      self.max_tokens or _DEFAULT_TOKENS["yes_no"], self.purpose,
                                      json_object_schema=calls.YES_NO_BARE_SCHEMA)
        else:
            reply = calls._structured(self.chat_generator, text, schema or self.schema or {}, self.schema_name,
                                      self.max_tokens or _DEFAULT_TOKENS["json"], self.purpose)
        return {"replies": [ChatMessage.from_assistant(reply, meta=meta)]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               max_tokens=self.max_tokens, output=self.output, schema=self.schema,
                               schema_name=self.schema_name, purpose=self.purpose)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConstrainedGeneration:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
