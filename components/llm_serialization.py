"""Serialization shared by the components that hold a chat generator: the generator and the named settings.

Usage:
    @component
    class Grader(ChatComponentSerialization):
        serialized_parameters = ("prompt_template", "max_tokens")
        def __init__(self, chat_generator, prompt_template=None, max_tokens=64): ...

    Grader.from_dict(Grader(llm).to_dict())  # the same generator type and settings
"""

from __future__ import annotations

from typing import Any, ClassVar

from haystack import default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace


class ChatComponentSerialization:
    """`to_dict`/`from_dict` of a component whose `chat_generator` and `serialized_parameters` attributes are its
    `__init__` arguments of the same names."""

    serialized_parameters: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        generator = component_to_dict(self.chat_generator, "chat_generator")  # type: ignore[attr-defined]
        return default_to_dict(self, chat_generator=generator,
                               **{name: getattr(self, name) for name in self.serialized_parameters})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
