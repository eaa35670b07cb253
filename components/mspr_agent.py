"""MSPR's Adaptive Reasoning-and-Retrieval agent (ARA): one thought and one action per step, as constrained JSON."""

from __future__ import annotations

import re
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.mspr_state import ACTION_ANSWER, ACTION_SEARCH_SECONDARY, ACTIONS, AgentDecision, MSPRState
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_json

_MAX_FIELD_CHARS = 500


def _input_hint(actions: tuple[str, ...]) -> str:
    hints = []
    if any(a != ACTION_ANSWER for a in actions):
        hints.append("the search query for a search")
    if ACTION_ANSWER in actions:
        hints.append("the final answer for answer")
    return ", ".join(hints)


def action_schema(actions: tuple[str, ...]) -> dict[str, Any]:
    """The JSON schema of one step; the action is an enum, so a constrained model cannot invent one."""
    return {
        "type": "object",
        "properties": {
            "thought": {"type": "string"},
            "action": {"type": "string", "enum": list(actions)},
            "action_input": {"type": "string"},
        },
        "required": ["thought", "action", "action_input"],
        "additionalProperties": False,
    }


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def echoed_names(action_input: str, names: tuple[str, ...]) -> bool:
    """True when the input is nothing but names from the prompt (actions, sources), however punctuated or
    spaced: "search_primary", "`answer`", "Search primary.", "search_primary, answer", "collection:main"."""
    words = _words(action_input)
    if not words:
        return True
    name_words = {tuple(_words(name)) for name in names}
    # Greedy cover of the input's words by whole names: an echo leaves nothing of its own.
    position = 0
    while position < len(words):
        match = next((n for n in sorted(name_words, key=len, reverse=True)
                      if n and tuple(words[position:position + len(n)]) == n), None)
        if match is None:
            return False
        position += len(match)
    return True


def parse_decision(data: dict[str, Any] | None, actions: tuple[str, ...], *, forced: bool,
                   sources: tuple[str, ...] = ()) -> AgentDecision:
    """A decision from the model's JSON; `malformed` (with its `problem`) when the action is unknown, or its
    input is empty or only repeats action or source names (the prompt echoed back, as small models do)."""
    if not isinstance(data, dict):
        return AgentDecision(malformed=True, forced_answer=forced, problem="the reply was not a JSON object")
    thought, action, action_input = data.get("thought"), data.get("action"), data.get("action_input")
    if not isinstance(action, str) or action.strip() not in actions:
        return AgentDecision(malformed=True, forced_answer=forced,
                             problem=f"the action must be one of {', '.join(actions)}")
    action = action.strip()
    if not isinstance(action_input, str) or not _words(action_input):
        return AgentDecision(action=action, malformed=True, forced_answer=forced,
                             problem="the action_input was empty")
    if echoed_names(action_input, (*ACTIONS, *sources)):
        return AgentDecision(action=action, malformed=True, forced_answer=forced,
                             problem="the action_input only repeated an action or source name")
    return AgentDecision(
        thought=(thought if isinstance(thought, str) else "").strip()[:_MAX_FIELD_CHARS],
        action=action.strip(),
        action_input=" ".join(action_input.split())[:_MAX_FIELD_CHARS],
        forced_answer=forced,
    )


@component
class MSPRAgent:
    """
    Writes the next step of an MSPR run: a thought, an action (`search_primary`, `search_secondary`, `answer`)
    and its input (a search query or the final answer), from the question, the previous steps and the
    refined observations. The first step must search (nothing to answer from yet). The output is
    schema-constrained JSON; anything unusable becomes a decision marked
    `malformed` (the controller retries, then stops), never an exception. When the state asks for an answer
    (`phase == "answer_now"`: the step budget is spent) only `answer` is offered.

    Usage example:
    ```python
    agent = MSPRAgent(chat_generator=OpenAIChatGenerator(...))
    state = agent.run(state=MSPRState(question="Who founded Acme?", sources=("collection:main", "web")))["state"]
    state.last_decision.action, state.last_decision.action_input
    ```
    """

    step_kind = "reasoning"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None, max_tokens: int = 160,
                 max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `reasoner` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `actions`, `primary`, `secondary`, `previous`,
            `context`, `feedback`, `input_hint`); the packaged `mspr_agent` by default.
        :param max_tokens: Token cap of one step's JSON.
        :param max_document_chars: Each passage of the newest observation is cut to this many characters.
        """
        if max_tokens < 16 or max_document_chars < 20:
            raise ValueError("max_tokens must be at least 16 and max_document_chars at least 20")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("mspr_agent")
        self.max_tokens = max_tokens
        self.max_document_chars = max_document_chars

    @component.output_types(state=MSPRState, decision=dict)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far.
        :returns: `state` with the new decision appended (`phase="decided"`), and the `decision` for the trace.
        """
        forced = state.phase == "answer_now"
        actions = (ACTION_ANSWER,) if forced else ACTIONS
        if not forced and not state.observations:
            # Nothing searched yet: an answer now would be the no-retrieval baseline (small models love to).
            actions = tuple(a for a in actions if a != ACTION_ANSWER)
        if len(set(state.sources)) == 1 and not forced:
            # One source: "secondary" would search the same one again under another name.
            actions = tuple(a for a in actions if a != ACTION_SEARCH_SECONDARY)
        feedback = state.review_reason if state.review_passed is False else ""
        # A retried step says what was wrong with the rejected one: the same prompt again would get the same
        # reply from a deterministic model.
        last = state.last_decision
        rejected = last.problem if state.action_retries and last is not None and last.malformed else ""
        prompt = render_prompt(
            self.prompt_template, question=state.question, actions=actions, primary=state.primary_source,
            secondary=state.secondary_source, previous=[d for d in state.decisions if not d.malformed],
            context=state.context(self.max_document_chars), feedback=feedback, input_hint=_input_hint(actions),
            rejected=rejected,
        )
        data = generate_json(self.chat_generator, prompt, action_schema(actions), name="mspr_step",
                             max_tokens=self.max_tokens, purpose="mspr_step")
        decision = parse_decision(data, actions, forced=forced, sources=tuple(state.sources))
        new_state = state.evolve(phase="decided", decisions=(*state.decisions, decision))
        return {"state": new_state, "decision": {**decision.__dict__, "offered_actions": list(actions)}}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            prompt_template=self.prompt_template,
            max_tokens=self.max_tokens,
            max_document_chars=self.max_document_chars,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MSPRAgent:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
