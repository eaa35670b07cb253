"""A prompted LLM step as a Haystack graph: `prompt_builder` -> `llm` -> `parser`, wrapped as one node.

`prompt_builder` is a `ChatPromptBuilder` holding the step's Jinja template (the packaged one, or a deployer's from
`DOCQA_PROMPTS_DIR`, read when the strategy is built); `llm` is a `ConstrainedGeneration` of the step's role
generator (budget, token cap, constrained output, recording); `parser` is a typed reply reader
(`docqa.components.reply_parsers`) that never raises on malformed output. The three run as a `SuperComponent`,
so the strategy graph keeps one node per step (its name is the step auditors know) while each inner run is a
traced span and step of its own, the model call recorded on the `llm` one.

A step class names its template variables, its parser and its outputs; serialization is shared: a step is
written as its chat generator, its template and its scalar settings (`prompt_template` is editable in an
exported YAML), and rebuilt from them.

Usage:
    @component
    class Judge(PromptedLLM):
        def __init__(self, chat_generator, prompt_template=None):
            super().__init__(chat_generator, prompt_template or load_prompt("resp_judge"),
                             YesNoReplyParser(), variables=["question", "memory"],
                             outputs={"yes": "sufficient", "verdict": "verdict"}, output="yes_no", purpose="judge",
                             init_parameters={"prompt_template": prompt_template})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from haystack import Pipeline, component, default_from_dict, default_to_dict
from haystack.components.builders import ChatPromptBuilder
from haystack.core.component.sockets import Sockets
from haystack.core.component.types import InputSocket, OutputSocket
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_chatgenerator_inplace, deserialize_component_inplace

from docqa.components.llm_generation import ConstrainedGeneration, Output

# Step kinds of the inner nodes; a step whose reply is the strategy's answer has its model call as "generation".
PROMPT_KIND = "prompt"
LLM_KIND = "llm"
PARSE_KIND = "parse"


def inner_step_kinds(pipeline: Pipeline) -> dict[str, str]:
    """Step kind per inner node name of the pipeline's prompted LLM steps (for `HaystackStrategy(kinds=...)`)."""
    kinds: dict[str, str] = {}
    for _, instance in pipeline.walk():
        kinds.update(getattr(instance, "step_kinds", {}))
    return kinds


def expose_sockets(instance: SuperComponent, inputs: Mapping[str, tuple[Any, Any]],
                   outputs: Mapping[str, Any]) -> None:
    """Give a `SuperComponent` that runs its graph once per call, several calls a run, its own outer sockets
    (`inputs`: name -> (type, default, `_empty` when mandatory); `outputs`: name -> type)."""
    instance.__haystack_input__ = Sockets(instance, {  # type: ignore[attr-defined]
        name: InputSocket(name, kind, default) for name, (kind, default) in inputs.items()}, InputSocket)
    instance.__haystack_output__ = Sockets(instance, {  # type: ignore[attr-defined]
        name: OutputSocket(name, kind) for name, kind in outputs.items()}, OutputSocket)


@component
class PromptedLLM(SuperComponent):
    """
    One LLM step of a strategy: its template rendered, one constrained model call, its reply parsed.

    Usage example:
    ```python
    step = PromptedLLM(RoleChatGenerator("generator"), "Q: {{ question }}", TextReplyParser(),
                       variables=["question"], outputs={"answer": "answer"})
    step.run(question="Capital of France?")["answer"]
    ```
    """

    def __init__(
        self,
        chat_generator: Any,
        template: str,
        parser: Any,
        *,
        variables: list[str],
        outputs: Mapping[str, str],
        required_variables: list[str] | None = None,
        max_tokens: int | None = None,
        output: Output = "text",
        schema: dict[str, Any] | None = None,
        schema_name: str = "output",
        purpose: str = "text",
        llm_kind: str = LLM_KIND,
        request: Any = None,
        check: Any = None,
        init_parameters: Mapping[str, Any] | None = None,
    ) -> None:
        """
        :param chat_generator: the role's chat generator.
        :param template: the Jinja2 template of the user message.
        :param parser: the reply parser; its inputs beside `replies` and `prompt` are step inputs too.
        :param variables: the template variables, each an input of the step (whether a template uses it or not,
            so a deployer's template may drop one).
        :param outputs: parser output -> step output.
        :param required_variables: the variables a run must give (all by default); a missing other one renders
            as ''.
        :param max_tokens: completion token cap of the call.
        :param output: the reply's constraint ("text", "yes_no" or "json").
        :param schema: the JSON schema of a "json" reply.
        :param schema_name: the schema's name as sent to the endpoint.
        :param purpose: what the call is for, recorded with it; the inner nodes are named after it
            (`<purpose>_prompt`, `<purpose>_llm`, `<purpose>_parser`), so a trace says which step they serve.
        :param llm_kind: the step kind of the model call ("generation" when its reply is the answer).
        :param request: a first node (`<purpose>_request`) whose inputs are the step's and whose outputs of the
            same names feed the template variables and the parser (e.g. the prompt's parts read from a state); its
            `schema` output, if any, is the JSON schema of this run's reply.
        :param check: a last node (`<purpose>_check`) after the parser: each of its inputs is fed by the parser's
            output of that name, else by the step input of that name, and `outputs` name its outputs (e.g. a
            guard that refuses a parsed plan).
        :param init_parameters: what `to_dict` writes beside the chat generator (the subclass's own arguments).
        """
        self.chat_generator = chat_generator
        self.prompt_template = template
        self.max_tokens = max_tokens
        self._init_parameters = dict(init_parameters or {})
        prompt_node, llm_node, parser_node = f"{purpose}_prompt", f"{purpose}_llm", f"{purpose}_parser"
        self.step_kinds = {prompt_node: PROMPT_KIND, llm_node: llm_kind, parser_node: PARSE_KIND}
        pipeline = Pipeline()
        required = list(variables if required_variables is None else required_variables)
        pipeline.add_component(
            prompt_node,
            ChatPromptBuilder(
                template=[ChatMessage.from_user(template)], variables=list(variables), required_variables=required
            ),
        )
        pipeline.add_component(
            llm_node,
            ConstrainedGeneration(
                chat_generator,
                max_tokens=max_tokens,
                output=output,
                schema=schema,
                schema_name=schema_name,
                purpose=purpose,
            ),
        )
        pipeline.add_component(parser_node, parser)
        pipeline.connect(f"{prompt_node}.prompt", f"{llm_node}.prompt")
        pipeline.connect(f"{llm_node}.replies", f"{parser_node}.replies")
        parser_inputs = set(parser.__haystack_input__._sockets_dict)
        if "prompt" in parser_inputs:
            pipeline.connect(f"{prompt_node}.prompt", f"{parser_node}.prompt")
        mapping = {name: [f"{prompt_node}.{name}"] for name in variables}
        for name in sorted(parser_inputs - {"replies", "prompt"}):
            mapping.setdefault(name, []).append(f"{parser_node}.{name}")
        if request is not None and "schema" in request.__haystack_output__._sockets_dict:
            # A reply schema that depends on the run comes from the request, with the prompt's parts.
            mapping.setdefault("schema", []).append(f"{llm_node}.schema")
        last = parser_node
        if check is not None:
            last = f"{purpose}_check"
            self.step_kinds[last] = getattr(check, "step_kind", PARSE_KIND)
            self.step_kinds.update(getattr(check, "step_kinds", {}))
            pipeline.add_component(last, check)
            parser_outputs = set(parser.__haystack_output__._sockets_dict)
            for name in check.__haystack_input__._sockets_dict:
                if name in parser_outputs:
                    pipeline.connect(f"{parser_node}.{name}", f"{last}.{name}")
                else:
                    mapping.setdefault(name, []).append(f"{last}.{name}")
        if request is not None:
            request_node = f"{purpose}_request"
            self.step_kinds[request_node] = PROMPT_KIND
            pipeline.add_component(request_node, request)
            for name, targets in mapping.items():
                for target in targets:
                    pipeline.connect(f"{request_node}.{name}", target)
            mapping = {name: [f"{request_node}.{name}"] for name in request.__haystack_input__._sockets_dict}
        SuperComponent.__init__(
            self,
            pipeline,
            input_mapping=mapping,
            output_mapping={f"{last}.{socket}": name for socket, name in outputs.items()},
        )

    def to_dict(self) -> dict[str, Any]:
        params = {
            key: component_to_dict(value, key) if hasattr(value, "__haystack_input__") else value
            for key, value in self._init_parameters.items()
        }
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"), **params)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptedLLM:
        params = data["init_parameters"]
        deserialize_chatgenerator_inplace(params, key="chat_generator")
        for key, value in list(params.items()):
            if key != "chat_generator" and isinstance(value, dict) and "type" in value and "init_parameters" in value:
                deserialize_component_inplace(params, key=key)
        return default_from_dict(cls, data)
