"""MSPR's Adaptive Reasoning-and-Retrieval agent (ARA): one thought and one action per step, as constrained JSON."""

from __future__ import annotations

import re
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.mspr_state import ACTIONS, Action, AgentDecision, MSPRState, Phase
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_json

# Bounds of the step's free-text fields, in characters (the schema's maxLength). A constrained server writes
# at most one token per character (JSON escapes aside), so a token cap of 2 x the bound + the JSON skeleton
# always lets the object close: a step is never cut off mid-JSON by the cap.
_MAX_FIELD_CHARS = 120
_MIN_FIELD_CHARS = 16
_SKELETON_TOKENS = 80  # braces, quotes, keys, spaces and the longest action name (65 characters), with room
# What a small model copies back from the prompt instead of writing a query or an answer: the JSON keys and
# the input hints (plus the action and source names, see `parse_decision`).
_PROMPT_PHRASES = ("thought", "action", "action_input", "action input", "the search query for a search",
                   "the final answer for answer", "search query", "final answer")


def step_token_cap(field_chars: int = _MAX_FIELD_CHARS) -> int:
    """The completion-token cap that always fits a step whose text fields hold `field_chars` characters."""
    return 2 * field_chars + _SKELETON_TOKENS


# The smallest cap a step may have: below it the thought and the input would be too short to say anything.
MIN_STEP_TOKENS = step_token_cap(_MIN_FIELD_CHARS)


def _input_hint(actions: tuple[str, ...]) -> str:
    hints = []
    if any(a != Action.ANSWER for a in actions):
        hints.append("the search query for a search")
    if Action.ANSWER in actions:
        hints.append("the final answer for answer")
    return ", ".join(hints)


def action_schema(actions: tuple[str, ...], field_chars: int = _MAX_FIELD_CHARS) -> dict[str, Any]:
    """The JSON schema of one step: the action is an enum (a constrained model cannot invent one) and both text
    fields are bounded (see `step_token_cap`), the input never empty."""
    return {
        "type": "object",
        "properties": {
            "thought": {"type": "string", "maxLength": field_chars},
            "action": {"type": "string", "enum": list(actions)},
            "action_input": {"type": "string", "minLength": 1, "maxLength": field_chars},
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


def _input_problem(action_input: Any, sources: tuple[str, ...]) -> str:
    """What makes an action input unusable ('' when it is usable)."""
    if not isinstance(action_input, str) or not _words(action_input):
        return "the action_input was empty"
    if echoed_names(action_input, (*ACTIONS, *sources, *_PROMPT_PHRASES)):
        return "the action_input only repeated an action or source name"
    return ""


def parse_decision(data: dict[str, Any] | None, actions: tuple[str, ...], *, forced: bool,
                   sources: tuple[str, ...] = (), question: str = "") -> AgentDecision:
    """A decision from the model's JSON; `malformed` (with its `problem`) when it is not a JSON object with a
    known action, or when an answer's text is empty or only repeats names from the prompt (the prompt echoed
    back, as small models do). A search whose query is unusable that way searches the `question` instead
    (`query_from="question"`): the action is the model's decision, and the question is what PRS would search
    anyway. Without a `question` such a search is malformed too."""
    if not isinstance(data, dict):
        return AgentDecision(malformed=True, forced_answer=forced, problem="the reply was not a JSON object")
    thought, action, action_input = data.get("thought"), data.get("action"), data.get("action_input")
    if not isinstance(action, str) or action.strip() not in actions:
        return AgentDecision(malformed=True, forced_answer=forced,
                             problem=f"the action must be one of {', '.join(actions)}")
    action = action.strip()
    thought = (thought if isinstance(thought, str) else "").strip()[:_MAX_FIELD_CHARS]
    problem = _input_problem(action_input, sources)
    if problem and (action == Action.ANSWER or not question.strip()):
        return AgentDecision(thought=thought, action=action, malformed=True, forced_answer=forced, problem=problem)
    if problem:
        return AgentDecision(thought=thought, action=action, action_input=" ".join(question.split()),
                             forced_answer=forced, problem=f"{problem}: the question is searched",
                             query_from="question")
    assert isinstance(action_input, str)  # checked by _input_problem
    return AgentDecision(thought=thought, action=action, action_input=" ".join(action_input.split())[:_MAX_FIELD_CHARS],
                         forced_answer=forced)


@component
class MSPRAgent:
    """
    Writes the next step of an MSPR run: a thought, an action (`search_primary`, `search_secondary`, `answer`)
    and its input (a search query or the final answer), from the question, the previous steps and the
    refined observations. The first step searches the preferred source (PRS: the primary is explored first,
    and there is nothing to answer from yet), so only `search_primary` is offered. The output is
    schema-constrained JSON (action an enum, text fields bounded so the token cap never cuts the JSON off); a
    search whose query only echoes the prompt searches the question instead, anything else unusable becomes a
    decision marked `malformed` (the controller retries, then stops), never an exception. When the state asks
    for an answer (`phase == "answer_now"`: the step budget is spent) only `answer` is offered.

    Usage example:
    ```python
    agent = MSPRAgent(chat_generator=OpenAIChatGenerator(...))
    state = agent.run(state=MSPRState(question="Who founded Acme?", sources=("collection:main", "web")))["state"]
    state.last_decision.action, state.last_decision.action_input
    ```
    """

    step_kind = "reasoning"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_tokens: int | None = None, max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `reasoner` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `actions`, `primary`, `secondary`, `previous`,
            `context`, `feedback`, `input_hint`); the packaged `mspr_agent` by default.
        :param max_tokens: Token cap of one step's JSON (`step_token_cap()` by default); a smaller cap bounds
            the thought and the input to fewer characters, so that the JSON still always closes.
        :param max_document_chars: Each passage of the newest observation is cut to this many characters.
        """
        max_tokens = step_token_cap() if max_tokens is None else max_tokens
        if max_tokens < MIN_STEP_TOKENS or max_document_chars < 20:
            raise ValueError(f"max_tokens must be at least {MIN_STEP_TOKENS} and max_document_chars at least 20")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("mspr_agent")
        self.max_tokens = max_tokens
        self.field_chars = min(_MAX_FIELD_CHARS, (max_tokens - _SKELETON_TOKENS) // 2)
        self.max_document_chars = max_document_chars

    @component.output_types(state=MSPRState, decision=dict)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far.
        :returns: `state` with the new decision appended (`phase="decided"`), and the `decision` for the trace.
        """
        forced = state.phase == Phase.ANSWER_NOW
        actions = (Action.ANSWER,) if forced else ACTIONS
        if not forced and not state.observations:
            # Nothing searched yet: an answer now would be the no-retrieval baseline (small models love to), and
            # PRS explores the preferred source before any other.
            actions = (Action.SEARCH_PRIMARY,)
        if len(set(state.sources)) == 1 and not forced:
            # One source: "secondary" would search the same one again under another name.
            actions = tuple(a for a in actions if a != Action.SEARCH_SECONDARY)
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
        data = generate_json(self.chat_generator, prompt, action_schema(actions, self.field_chars),
                             name="mspr_step", max_tokens=self.max_tokens, purpose="mspr_step")
        decision = parse_decision(data, actions, forced=forced, sources=tuple(state.sources),
                                  question=state.question)
        new_state = state.evolve(phase=Phase.DECIDED, decisions=(*state.decisions, decision))
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
