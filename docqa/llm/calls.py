"""Calling a chat generator: plain text, Yes/No and JSON, each constrained where the server allows it.

LLM output is untrusted input: every helper returns a value or `None`/a default, never raises on malformed
output. Endpoint failures (unreachable, server error, rejected key or request) become `LLMUnavailableError`
with a one-line message. Structured outputs are sent as `json_schema`, else as llama-cpp-python's
`json_object` + `schema`, else unconstrained; the shape each endpoint accepts is remembered. Each call is a
`docqa.llm.call` span (`docqa.spans`: prompt, raw response, model, token usage, purpose, time), which docqa's
tracer adds to the step it runs in for the audit trail.

Usage:
    from haystack.components.generators.chat import OpenAIChatGenerator
    verdict = generate_yes_no(chat_generator, "Can the question be answered? ...")  # True / False / None
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from haystack.dataclasses import ChatMessage

from docqa.errors import LLMUnavailableError
from docqa.result import LLMUsage
from docqa.run_control import bounded_max_tokens, current_run
from docqa.spans import LLMCall, llm_call_span
from docqa.token_stream import accepts_streaming_callback, answer_streaming_callback

YES_NO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["Yes", "No"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
# The same verdict as a bare JSON string: 3 tokens instead of 13, where the server allows a non-object root
# (grammar-constrained tokens are the slow ones on a small local model).
YES_NO_BARE_SCHEMA: dict[str, Any] = {"type": "string", "enum": ["Yes", "No"]}


class ChatGenerator(Protocol):
    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        ...


def usage_from(reply: ChatMessage | None, prompt: str, text: str) -> LLMUsage:
    """The call's usage as the server reports it, estimated (4 characters a token) where it reports none."""
    usage = (reply.meta.get("usage") if reply is not None else None) or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens")
    # Servers that report no usage still get an estimate so totals stay comparable.
    if prompt_tokens is None:
        prompt_tokens = max(1, len(prompt) // 4)
    if completion_tokens is None:
        completion_tokens = max(1, len(text) // 4) if text else 0
    return LLMUsage(calls=1, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens))


def finish_call(call: LLMCall, prompt: str, result: dict[str, Any]) -> tuple[str, ChatMessage | None]:
    """Close a model call's span with the generator's first reply: its text, model and token usage.

    :returns: the reply's text ('' when the model said nothing) and the reply itself (None without one).
    """
    replies = result.get("replies") or []
    reply = replies[0] if replies else None
    text = (reply.text if reply is not None else None) or ""
    usage = usage_from(reply, prompt, text)
    call.finish(text, model=reply.meta.get("model") if reply is not None else None,
                prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
    return text, reply


def _unavailable_reason(exc: Exception) -> str | None:
    """Why the endpoint cannot serve requests, or None when `exc` is not an endpoint failure."""
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a haystack dependency
        return None
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return "unreachable"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return "rejected the API key"
    if isinstance(exc, openai.NotFoundError):
        return "does not serve the model (or its base URL lacks /v1)"
    if isinstance(exc, openai.RateLimitError):
        return "is rate limiting"
    if isinstance(exc, openai.InternalServerError):
        return "failed"
    if _is_rejected_request(exc):
        # E.g. a prompt longer than the context window: a configuration problem, not malformed output.
        return "rejected the request"
    return None


def _is_rejected_request(exc: Exception) -> bool:
    """True when the server refused the request's parameters (typically an unsupported response_format)."""
    try:
        import openai
    except ImportError:  # pragma: no cover
        return False
    if isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError):
        return True
    # llama-cpp-python's server reports request validation errors as HTTP 500.
    return isinstance(exc, openai.InternalServerError) and "response_format" in str(exc)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _run_generator(
    generator: ChatGenerator, prompt: str, generation_kwargs: dict[str, Any], *, raise_rejected: bool,
    streaming_callback: Any = None,
) -> dict[str, Any]:
    try:
        if streaming_callback is not None and accepts_streaming_callback(generator):
            return generator.run(messages=[ChatMessage.from_user(prompt)],  # type: ignore[call-arg]
                                 generation_kwargs=generation_kwargs, streaming_callback=streaming_callback)
        return generator.run(messages=[ChatMessage.from_user(prompt)], generation_kwargs=generation_kwargs)
    except Exception as exc:
        if raise_rejected and _is_rejected_request(exc):
            raise
        reason = _unavailable_reason(exc)
        if reason is not None:
            # Callers and traces learn only that the model is unavailable; the endpoint is an operator's concern.
            endpoint = getattr(generator, "api_base_url", None) or "no URL"
            raise LLMUnavailableError(
                f"the language model is unavailable (its endpoint {reason})",
                detail=f"LLM endpoint {reason} ({endpoint}): {type(exc).__name__}: {_one_line(exc)}",
            ) from exc
        truncated = _truncated_completion(exc)
        if truncated is None:
            raise
        return truncated


def _truncated_completion(exc: Exception) -> dict[str, Any] | None:
    """The reply of a structured call the SDK refused to parse because it stopped early (length/filter)."""
    try:
        import openai
    except ImportError:  # pragma: no cover
        return None
    if not isinstance(exc, openai.LengthFinishReasonError | openai.ContentFilterFinishReasonError):
        return None
    completion = exc.completion
    choice = completion.choices[0] if completion.choices else None
    text = (choice.message.content if choice is not None else None) or ""
    usage = completion.usage.model_dump() if completion.usage is not None else {}
    meta = {"model": completion.model, "usage": usage, "finish_reason": choice.finish_reason if choice else None}
    return {"replies": [ChatMessage.from_assistant(text, meta=meta)]}


def bounded_kwargs(generation_kwargs: dict[str, Any], prompt: str) -> dict[str, Any]:
    """The kwargs with a checked token cap, after counting the call against the run's budget (if any)."""
    control = current_run()
    requested = generation_kwargs.get("max_tokens")
    if control is not None:
        cap = control.take_llm_call(len(prompt), requested)
    else:
        cap = None if requested is None else bounded_max_tokens(requested)
    return generation_kwargs if cap is None else {**generation_kwargs, "max_tokens": cap}


def _call(
    generator: ChatGenerator, prompt: str, generation_kwargs: dict[str, Any], purpose: str,
    *, raise_rejected: bool = False,
) -> tuple[str, ChatMessage | None]:
    """One traced call (a `docqa.llm.call` span). A refused request raises the SDK error when `raise_rejected` (to
    try another request shape), else `LLMUnavailableError` like every endpoint failure."""
    generation_kwargs = bounded_kwargs(generation_kwargs, prompt)
    constrained = "response_format" in generation_kwargs
    # An answer streams its tokens to the asker when the server listens (constrained output never does).
    streaming = None if constrained else answer_streaming_callback(purpose, prompt)
    with llm_call_span(prompt, purpose=purpose, constrained=constrained) as call:
        result = _run_generator(generator, prompt, generation_kwargs, raise_rejected=raise_rejected,
                                streaming_callback=streaming)
        if streaming is not None:
            streaming.finish()  # the reply is complete: release the line held back as a possible echo
        text, reply = finish_call(call, prompt, result)
    return text, reply


def generate_text(generator: ChatGenerator, prompt: str, *, max_tokens: int | None = None,
                  purpose: str = "text") -> str:
    """Free-form generation; returns the stripped text ('' when the model says nothing)."""
    return generate_reply(generator, prompt, max_tokens=max_tokens, purpose=purpose)[0]


def generate_reply(generator: ChatGenerator, prompt: str, *, max_tokens: int | None = None,
                   purpose: str = "text") -> tuple[str, str | None]:
    """Free-form generation: the stripped text and the model's finish reason ("length" when the token limit
    cut it; None when the endpoint does not say)."""
    kwargs: dict[str, Any] = {}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    text, reply = _call(generator, prompt, kwargs, purpose)
    finish = reply.meta.get("finish_reason") if reply is not None else None
    return text.strip(), finish if isinstance(finish, str) else None


# How a JSON schema is sent, most standard first: OpenAI, vLLM, Ollama and llama.cpp's llama-server take
# `json_schema`; llama-cpp-python's server only takes `json_object` with a `schema`.
_CONSTRAINED_STYLES: tuple[str, ...] = ("json_schema", "json_object")
_UNCONSTRAINED = "none"
# The style each endpoint accepted, so a rejected style costs one request per endpoint, not one per call.
_accepted_style: dict[str, str] = {}


def _response_format(style: str, schema: dict[str, Any], name: str,
                     json_object_schema: dict[str, Any] | None) -> dict[str, Any]:
    if style == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
    return {"type": "json_object", "schema": json_object_schema or schema}


def _structured(generator: ChatGenerator, prompt: str, schema: dict[str, Any], name: str,
                max_tokens: int, purpose: str, json_object_schema: dict[str, Any] | None = None) -> str:
    """Constrained text. `json_object_schema` replaces `schema` for llama-cpp-python's `json_object` style,
    whose grammar accepts any root type (OpenAI's `json_schema` requires an object)."""
    endpoint = getattr(generator, "api_base_url", None)
    endpoint = endpoint if isinstance(endpoint, str) else None
    remembered = _accepted_style.get(endpoint) if endpoint else None
    styles = _CONSTRAINED_STYLES
    if remembered is not None:
        styles = () if remembered == _UNCONSTRAINED else styles[styles.index(remembered):]
    for style in styles:
        response_format = _response_format(style, schema, name, json_object_schema)
        kwargs = {"max_tokens": max_tokens, "response_format": response_format}
        try:
            text, _ = _call(generator, prompt, kwargs, purpose, raise_rejected=True)
        except Exception as exc:
            if not _is_rejected_request(exc):
                raise
            continue
        if endpoint:
            _accepted_style[endpoint] = style
        return text
    # No structured output on this server: ask plainly and parse defensively.
    if endpoint:
        _accepted_style[endpoint] = _UNCONSTRAINED
    text, _ = _call(generator, prompt, {"max_tokens": max_tokens}, purpose)
    return text


def parse_yes_no(text: str) -> bool | None:
    """Read a Yes/No verdict from JSON (`{"answer": "Yes"}`) or free text; None when neither is clear."""
    data = parse_json_object(text)
    if data is not None:
        # A JSON reply speaks through its `answer` field only; any other shape is unreadable.
        answer = data.get("answer")
        if not isinstance(answer, str):
            return None
        text = answer
    words = re.findall(r"[a-z]+", text.lower())
    for word in words[:5]:
        if word in ("yes", "true"):
            return True
        if word in ("no", "false"):
            return False
    return None


def generate_yes_no(generator: ChatGenerator, prompt: str, *, purpose: str = "yes_no") -> bool | None:
    """Constrained Yes/No; None when the output cannot be read as either."""
    text = _structured(generator, prompt, YES_NO_SCHEMA, "yes_no", 16, purpose,
                       json_object_schema=YES_NO_BARE_SCHEMA)
    return parse_yes_no(text)


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (also inside code fences), or None."""
    text = text.strip()
    if not text:
        return None
    candidates = [text]
    start = text.find("{")
    end = text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            # Not strict: llama.cpp's JSON-schema grammar lets a string hold a raw newline or tab, which the
            # strict decoder refuses, and a constrained step would then be lost for a line break in its text.
            data = json.loads(candidate, strict=False)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def generate_json(generator: ChatGenerator, prompt: str, schema: dict[str, Any], *, name: str = "output",
                  max_tokens: int = 128, purpose: str = "json") -> dict[str, Any] | None:
    """Schema-constrained JSON object; None when the output is not a JSON object with the required keys."""
    return parse_schema_object(_structured(generator, prompt, schema, name, max_tokens, purpose), schema)


def parse_schema_object(text: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON object in a reply when it has the schema's required keys, else None."""
    data = parse_json_object(text)
    if data is None or any(key not in data for key in schema.get("required", [])):
        return None
    return data


_ANSWER_LABEL = re.compile(r"^\s*(?:final\s+)?(?:answer|summary)\s*(?::\s*|$)", re.IGNORECASE)
_QUESTION_LINE = re.compile(r"^\s*question\s*:", re.IGNORECASE)
_MIN_ECHO_PREFIX = 20
# A reply line that starts with this many characters of an instruction line of the prompt is an echo of the
# instruction, even when the model then wanders off it ("...numbered passages below. [1][4]"). Numbered passage
# lines ("[n] ...") do not count: an answer may rightly quote a passage.
_MIN_INSTRUCTION_ECHO = 60
_PLACEHOLDER = re.compile(r"<[^<>\n]{3,120}>")
_WORD = re.compile(r"[^\W\d_]{2,}")


def strip_prompt_echo(reply: str, prompt: str) -> str:
    """The reply without lines that repeat the prompt, "Question: ..." continuations and "Answer:" labels.

    Base (not instruction-tuned) models often continue or repeat the prompt instead of answering; what remains
    may be empty, which callers treat as "no answer" rather than showing the prompt back to the user. Template
    placeholders copied from the prompt ("<the final answer in one or two sentences>") are dropped too.
    """
    reply = drop_prompt_placeholders(reply, prompt)
    prompt_lines = [line.strip() for line in prompt.splitlines() if line.strip()]
    kept = []
    for line in reply.splitlines():
        text = _without_echo(line.strip(), prompt_lines)
        text = _ANSWER_LABEL.sub("", text).strip()
        if text:
            kept.append(text)
    return "\n".join(kept)


def drop_prompt_placeholders(text: str, prompt: str) -> str:
    """`text` without the template placeholders it copied from `prompt` ("<the final answer ...>"); one that the
    prompt does not hold stays."""
    return _PLACEHOLDER.sub(lambda m: "" if m.group(0) in prompt else m.group(0), text)


def _without_echo(text: str, prompt_lines: list[str]) -> str:
    """`text` without the prompt it starts with (whole prompt lines, instruction stretches), "" if nothing else."""
    while text:
        # "Answer: <echo>" is an echo too: look past the label the prompt ends with.
        text = _ANSWER_LABEL.sub("", text).strip()
        if not text or _QUESTION_LINE.match(text) or _repeats_a_line(text, prompt_lines):
            return ""
        echoed = _instruction_echo(text, prompt_lines)
        if not echoed:
            return text
        # Keep what the model added after the echo only when it has a word, not "[1][4]." alone.
        text = text[echoed:].lstrip(" .,;:-")
        if not _WORD.search(text):
            return ""
    return text


def _instruction_echo(text: str, prompt_lines: list[str]) -> int:
    """How many leading characters of `text` repeat a stretch of an instruction line of the prompt, from its start
    or from anywhere inside it ("numbered passages below. End every paragraph..."); 0 when too few to count."""
    head = text[:_MIN_INSTRUCTION_ECHO]
    # A whole instruction line at the start, however short ("Answer the question as briefly as possible.").
    longest = max((len(line) for line in prompt_lines if len(line) >= _MIN_ECHO_PREFIX and not line.startswith("[")
                   and text.startswith(line)), default=0)
    if len(head) == _MIN_INSTRUCTION_ECHO:
        for line in prompt_lines:
            at = line.find(head) if not line.startswith("[") else -1
            while at >= 0:
                longest = max(longest, _MIN_INSTRUCTION_ECHO + _shared_start(text[_MIN_INSTRUCTION_ECHO:],
                                                                           line[at + _MIN_INSTRUCTION_ECHO:]))
                at = line.find(head, at + 1)
    if not longest:
        return 0
    # Cut at a word boundary: "...below. End" against "...below. Ending" shares "End".
    while longest < len(text) and longest and text[longest - 1].isalnum() and text[longest].isalnum():
        longest -= 1
    return longest


def _shared_start(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _repeats_a_line(text: str, prompt_lines: list[str]) -> bool:
    # A reply cut off by max_tokens repeats only the start of a prompt line; short prefixes may be real answers.
    return any(text == line or (len(text) >= _MIN_ECHO_PREFIX and line.startswith(text)) for line in prompt_lines)
