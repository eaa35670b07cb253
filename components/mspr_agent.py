"""MSPR's Adaptive Reasoning-and-Retrieval agent (ARA): one thought and one action per step, as constrained JSON,
a prompted LLM step in the graph (request from the state -> prompt -> model call -> parser)."""

from __future__ import annotations

import re
from typing import Any

from haystack import component
from haystack.dataclasses import ChatMessage

from docqa.components.mspr_state import ACTIONS, Action, AgentDecision, MSPRState, Phase
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import reply_text
from docqa.llm.calls import ChatGenerator, parse_schema_object

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


_TEMPLATE_VARIABLES = ("question", "actions", "primary", "secondary", "previous", "context", "feedback", "input_hint",
                       "rejected")


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
class AgentStepRequest:
    """
    What one agent step is asked, read from the run's state: the prompt's parts, the actions offered now and the
    reply schema that allows only those. The first step searches the preferred source (PRS: the primary is
    explored first, and there is nothing to answer from yet), so only `search_primary` is offered; with one
    source there is no `search_secondary`; when the state asks for an answer (`phase == "answer_now"`: the step
    budget is spent) only `answer` is offered.

    Usage example:
    ```python
    out = AgentStepRequest().run(state=MSPRState(question="Who founded Acme?", sources=("collection:main",)))
    out["actions"], out["schema"]["properties"]["action"]["enum"]  # (search_primary,), ["search_primary"]
    ```
    """

    def __init__(self, field_chars: int = _MAX_FIELD_CHARS, max_document_chars: int = 600) -> None:
        """
        :param field_chars: Characters the thought and the input may hold (the schema's maxLength).
        :param max_document_chars: Each passage of the newest observation is cut to this many characters.
        """
        self.field_chars = field_chars
        self.max_document_chars = max_document_chars

    @component.output_types(question=str, actions=tuple, primary=str | None, secondary=str | None, previous=list,
                            context=str, feedback=str, input_hint=str, rejected=str, schema=dict[str, Any],
                            state=MSPRState, forced=bool)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far.
        :returns: the template's variables, the reply `schema`, and the `state` and `forced` flag the parser needs.
        """
        forced = state.phase == Phase.ANSWER_NOW
        actions = (Action.ANSWER,) if forced else ACTIONS
        if not forced and not state.observations:
            # Nothing searched yet: an answer now would be the no-retrieval baseline (small models love to).
            actions = (Action.SEARCH_PRIMARY,)
        if len(set(state.sources)) == 1 and not forced:
            # One source: "secondary" would search the same one again under another name.
            actions = tuple(a for a in actions if a != Action.SEARCH_SECONDARY)
        feedback = state.review_reason if state.review_passed is False else ""
        # A retried step says what was wrong with the rejected one: the same prompt again would get the same
        # reply from a deterministic model.
        last = state.last_decision
        rejected = last.problem if state.action_retries and last is not None and last.malformed else ""
        return {
            "question": state.question, "actions": actions, "primary": state.primary_source,
            "secondary": state.secondary_source, "previous": [d for d in state.decisions if not d.malformed],
            "context": state.context(self.max_document_chars), "feedback": feedback,
            "input_hint": _input_hint(actions), "rejected": rejected,
            "schema": action_schema(actions, self.field_chars), "state": state, "forced": forced,
        }


@component
class AgentStepParser:
    """
    Reads an agent step's JSON reply into a decision appended to the state (`phase="decided"`); an unreadable
    reply (not an object with the schema's keys) becomes a decision marked `malformed`, never an exception.

    Usage example:
    ```python
    out = AgentStepParser().run(replies=[ChatMessage.from_assistant(reply)], state=state, forced=False,
                                actions=(Action.SEARCH_PRIMARY,), schema=action_schema((Action.SEARCH_PRIMARY,)))
    out["state"].last_decision, out["decision"]
    ```
    """

    @component.output_types(state=MSPRState, decision=dict)
    def run(self, replies: list[ChatMessage], state: MSPRState, forced: bool, actions: tuple,
            schema: dict[str, Any]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param state: The run before this step.
        :param forced: Whether only an answer was offered.
        :param actions: The actions offered.
        :param schema: The reply's schema (its required keys are checked).
        :returns: `state` with the new decision appended, and the `decision` for the trace.
        """
        data = parse_schema_object(reply_text(replies), schema)
        decision = parse_decision(data, actions, forced=forced, sources=tuple(state.sources),
                                  question=state.question)
        new_state = state.evolve(phase=Phase.DECIDED, decisions=(*state.decisions, decision))
        return {"state": new_state, "decision": {**decision.__dict__, "offered_actions": list(actions)}}


@component
class MSPRAgent(PromptedLLM):
    """
    Writes the next step of an MSPR run: a thought, an action (`search_primary`, `search_secondary`, `answer`)
    and its input (a search query or the final answer), from the question, the previous steps and the
    refined observations: `AgentStepRequest` (the actions offered now) -> `ChatPromptBuilder` -> one
    schema-constrained JSON call (action an enum, text fields bounded so the token cap never cuts the JSON off)
    -> `AgentStepParser`. A search whose query only echoes the prompt searches the question instead, anything
    else unusable becomes a decision marked `malformed` (the controller retries, then stops), never an exception.

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
            `context`, `feedback`, `input_hint`, `rejected`); the packaged `mspr_agent` by default.
        :param max_tokens: Token cap of one step's JSON (`step_token_cap()` by default); a smaller cap bounds
            the thought and the input to fewer characters, so that the JSON still always closes.
        :param max_document_chars: Each passage of the newest observation is cut to this many characters.
        """
        max_tokens = step_token_cap() if max_tokens is None else max_tokens
        if max_tokens < MIN_STEP_TOKENS or max_document_chars < 20:
            raise ValueError(f"max_tokens must be at least {MIN_STEP_TOKENS} and max_document_chars at least 20")
        template = prompt_template or load_prompt("mspr_agent")
        self.field_chars = min(_MAX_FIELD_CHARS, (max_tokens - _SKELETON_TOKENS) // 2)
        self.max_document_chars = max_document_chars
        PromptedLLM.__init__(
            self,
            chat_generator,
            template,
            AgentStepParser(),
            variables=list(_TEMPLATE_VARIABLES),
            outputs={"state": "state", "decision": "decision"},
            max_tokens=max_tokens,
            output="json",
            schema=action_schema(ACTIONS, self.field_chars),
            schema_name="mspr_step",
            purpose="mspr_step",
            request=AgentStepRequest(self.field_chars, max_document_chars),
            init_parameters={"prompt_template": template, "max_tokens": max_tokens,
                             "max_document_chars": max_document_chars},
        )
