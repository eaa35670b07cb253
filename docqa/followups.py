"""Follow-up questions rewritten into standalone questions against the whole exchange, questions and answers.

A follow-up loses its referent when asked alone. Each user turn is rewritten against the standalone form of the
user turn before it and the answer given to that turn, so a referent carries through a chain of turns:
- a pronoun or a demonstrative ("it", "she", "his", "that person", "that company", "there") is replaced by what
  it refers to: a person pronoun by a person the last answer named (or the question's subject when it looks like
  one), "it" by the thing the last answer named when the last question asked "what/which ...", else by the last
  question's subject ("the Atlas budget", "Project Halcyon"); "there" by the place the answer put it in;
- "what about X?", "how about X?", "and X?" re-ask the previous question about X: the phrase of the previous
  question that X stands in for (a name for a name, "meals" for "taxis") is swapped;
- a follow-up that names its own subject and refers to nothing stays as it is;
- anything else too short to stand alone keeps the previous question as context ("... (regarding: ...)").

This deterministic rewrite is the default and the fallback. With `DOCQA_CONVERSATION_REWRITE=llm` (or `auto`, for
an endpoint that passes a small built-in check once per process), a model condenses the exchange into one
standalone question under a JSON schema; a rewrite that drops an entity the deterministic rewrite resolved is
rejected in its favour, and so is an empty, overlong or multi-line one. Either way the rewrite is one step
(kind "rewrite") whose outputs name the method.

Usage:
    rewrite = rewrite_followup([Turn("user", "Who leads Project Halcyon?"),
                                Turn("assistant", "Dana Whitlock leads it."),
                                Turn("user", "Where did that person work before?")])
    rewrite.question  # "Where did Dana Whitlock work before?"
    rewrite.to_step() # Step(kind="rewrite", outputs={"question": ..., "method": "referent_replaced", ...})
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from docqa.result import Step

RewriteMode = Literal["deterministic", "llm", "auto"]
REWRITE_MODES: tuple[str, ...] = ("deterministic", "llm", "auto")

METHOD_FIRST = "first_question"
METHOD_UNCHANGED = "standalone"
METHOD_REFERENT = "referent_replaced"
METHOD_SWAPPED = "subject_swapped"
METHOD_CONTEXT = "previous_question_as_context"
METHOD_LLM = "llm"
DETERMINISTIC_METHODS = (METHOD_FIRST, METHOD_UNCHANGED, METHOD_REFERENT, METHOD_SWAPPED, METHOD_CONTEXT)

# The exchange a model reads: the last turns only, each cut, so a long chat cannot blow the prompt.
_LLM_TURNS = 6
_LLM_TURN_CHARS = 600
_LLM_MAX_QUESTION_CHARS = 400


@dataclass(frozen=True)
class Turn:
    """One message of a conversation: `role` is "user" or "assistant"."""

    role: str
    content: str


@dataclass
class Rewrite:
    """The standalone `question` for the last user turn, how it was obtained, and what it read.

    `referents` are the phrases the rewrite put in for pronouns or swapped in (a model's rewrite must keep them);
    `subject` is what a later pronoun of the thread may refer to; `answer` is the reply the turn got, once known.
    """

    question: str
    original: str
    method: str
    subject: str | None = None
    referents: list[str] = field(default_factory=list)
    history: list[dict[str, str]] = field(default_factory=list)
    rejected: str | None = None  # a model's rewrite refused in favour of this one, and why
    answer: str = ""
    started_at: float = 0.0  # wall clock (epoch seconds), as every step of a run
    duration_s: float = 0.0

    def to_step(self) -> Step:
        outputs: dict[str, Any] = {"question": self.question, "method": self.method, "subject": self.subject,
                                   "referents": list(self.referents)}
        if self.rejected:
            outputs["rejected_llm_rewrite"] = self.rejected
        inputs = {"question": self.original, "history": list(self.history),
                  "previous_questions": [t["content"] for t in self.history if t["role"] == "user"]}
        return Step(index=0, kind="rewrite", name="conversation_rewrite", inputs=inputs, outputs=outputs,
                    started_at=self.started_at, duration_s=self.duration_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


REWRITE_ROLE = "summarizer"  # the model role that condenses an exchange under `llm`/`auto`


def rewrite_with_settings(messages: Sequence[Any], settings: Any,
                          chat_generator_of: Callable[[str], Any] | None = None) -> Rewrite:
    """The rewrite `settings.conversation_rewrite` asks for; every entry point's conversation goes through here.

    :param chat_generator_of: the runtime's `chat_generator(role)`; called only when a model is to be asked, so
        the deterministic default never starts a model.
    """
    mode = getattr(settings, "conversation_rewrite", "deterministic")
    if mode == "deterministic" or chat_generator_of is None:
        return rewrite_followup(messages)
    endpoint = settings.endpoint_for(REWRITE_ROLE)
    name = f"{endpoint.base_url or 'local'}|{endpoint.model or settings.llm_model}"
    from docqa.errors import DocqaError

    try:
        generator = chat_generator_of(REWRITE_ROLE)
    except DocqaError as exc:
        rewrite = rewrite_followup(messages)
        rewrite.rejected = f"the rewrite model is unavailable: {exc.message}"
        return rewrite
    return rewrite_followup(messages, mode=mode, chat_generator=generator, endpoint=name)


def as_turns(messages: Iterable[Any]) -> list[Turn]:
    """Turns from `Turn`s, `{"role", "content"}` dicts or `(role, content)` pairs; system and empty ones dropped."""
    turns: list[Turn] = []
    for message in messages:
        if isinstance(message, Turn):
            role, content = message.role, message.content
        elif isinstance(message, dict):
            role, content = message.get("role"), message.get("content")
        else:
            role, content = message
        if isinstance(content, list):  # OpenAI content parts: the text ones, in order
            content = " ".join(part.get("text") or "" for part in content
                               if isinstance(part, dict) and part.get("type") == "text")
        if role in ("user", "assistant") and isinstance(content, str) and content.strip():
            turns.append(Turn(role, " ".join(content.split())))
    return turns


def rewrite_followup(messages: Sequence[Any], *, mode: str = "deterministic", chat_generator: Any = None,
                     endpoint: str | None = None) -> Rewrite:
    """The last user turn of `messages` as a standalone question.

    :param messages: the exchange, oldest first, ending with the user's follow-up (see `as_turns`).
    :param mode: "deterministic", "llm" (a model condenses the exchange; checked against the deterministic
        rewrite) or "auto" (the model only when `endpoint` passed the built-in check).
    :param chat_generator: the model for "llm"/"auto" (a Haystack chat generator); without one, deterministic.
    :param endpoint: a name for the model's endpoint, under which "auto" remembers the check's outcome.
    :raises ValueError: no user turn, or an unknown mode.
    """
    if mode not in REWRITE_MODES:
        raise ValueError(f"unknown conversation rewrite {mode!r}: expected one of {', '.join(REWRITE_MODES)}")
    started, clock = time.time(), time.perf_counter()
    rewrite = _rewrite_turns(messages, mode, chat_generator, endpoint)
    rewrite.started_at, rewrite.duration_s = started, time.perf_counter() - clock
    return rewrite


def _rewrite_turns(messages: Sequence[Any], mode: str, chat_generator: Any, endpoint: str | None) -> Rewrite:
    turns = as_turns(messages)
    while turns and turns[-1].role != "user":
        turns.pop()
    if not turns:
        raise ValueError("a conversation needs a user question")
    rewrite = deterministic_rewrite(turns)
    if mode == "deterministic" or chat_generator is None or rewrite.method == METHOD_FIRST:
        return rewrite
    if mode == "auto" and not passes_rewrite_check(chat_generator, endpoint or repr(chat_generator)):
        return rewrite
    return llm_rewrite(turns, rewrite, chat_generator)


def deterministic_rewrite(turns: Sequence[Turn]) -> Rewrite:
    """The rule-based rewrite of the last user turn, each user turn rewritten against the exchange before it."""
    current: Rewrite | None = None
    history: list[dict[str, str]] = []
    for turn in turns:
        if turn.role == "assistant":
            if current is not None:
                current.answer = f"{current.answer} {turn.content}".strip()
        elif current is None:
            current = Rewrite(turn.content, turn.content, METHOD_FIRST, subject_of(turn.content))
        else:
            current = _rewrite(current, turn.content)
        history.append({"role": turn.role, "content": turn.content})
    if current is None:
        raise ValueError("a conversation needs a user question")
    current.history = history[:-1]
    current.answer = ""
    return current


# ---------------------------------------------------------------------------------------------------------- names

def _words(text: str) -> list[str]:
    return text.split()


_WORD = re.compile(r"[A-Za-z0-9À-ÿ][\w&'’.-]*|\"[^\"]+\"")
# Capitalised words that open questions or sentences rather than name something.
_NOT_NAMES = frozenset(_words(
    "what which who whom whose when where why how is are was were do does did can could should would will may "
    "might must shall has have had the a an in on at of for to and or but please tell list give name i we you "
    "our my your their its it this that these those he she they him her his them there yes no also then so "
    "according about after before both each every if not only since some than thanks thank ok okay well "
    "within without during until through across between among under over from into by via per towards around "
    "along beyond except plus approximately nearly almost at least most none all any every"
))
# Small words that may stand inside a name ("University of Oslo", "Ludwig van Beethoven").
_NAME_JOINERS = frozenset(_words("of de van von der du la del upon for the from"))
_FUNCTION_WORDS = frozenset(_words(
    "a an the this that these those is are was were be been being do does did has have had can could should "
    "would will may might must shall of in on at for to from by with about as into over under after before "
    "and or but not no it its he she they them his her their him there here what which who whom whose when "
    "where why how much many did i you we me my your our than then also so if any all some each every"
))
_PERSON_WORDS = frozenset(_words(
    "person man woman guy lady gentleman author writer director actor actress singer player manager leader "
    "founder ceo employee owner chair president minister officer boss head musician artist politician"
))
_PLACE_WORDS = frozenset(_words("place city town country state region village island area location site"))
_ORG_HINTS = frozenset(_words(
    "inc corp corporation company co ltd llc group bank university college school project program programme "
    "team club party association institute agency department ministry council committee foundation "
    "film album song book series show policy festival championship airport league"
))
_SUBJECT_PRONOUNS = {"he": "person", "she": "person", "him": "person", "her": "person", "it": "thing",
                     "they": "group", "them": "group"}
_POSSESSIVES = {"his": "person", "hers": "person", "its": "thing", "their": "group"}
_PERSON_QUESTION = re.compile(r"^\s*(?:and\s+)?(?:who|whom|whose)\b", re.IGNORECASE)
_THING_QUESTION = re.compile(r"^\s*(?:and\s+)?(?:(?:in|at|on|for|from|to|of|by|with|under)\s+)?(?:what|which)\b",
                             re.IGNORECASE)
# "Who is Grant Hill?": the answer describes the person asked about; the names it brings are not the referent.
_IDENTITY_QUESTION = re.compile(r"^\s*(?i:and\s+)?(?i:who)\s+(?i:is|was|are|were)\s+[A-Z][^?]*\?*\s*$")
_LEADING = re.compile(r"^\s*(?:and also|and|but|so|also|then|ok(?:ay)?|and then)\b[\s,]*", re.IGNORECASE)
_SWAP = re.compile(
    r"^\s*(?:(?:and|but|ok(?:ay)?|so)[\s,]+)?(?:what|how)\s+about\s+(?P<a>.+?)\s*[?.!]*\s*$"
    r"|^\s*(?:and|but)[\s,]+(?:for\s+|in\s+|of\s+)?(?P<b>.+?)\s*[?.!]*\s*$"
    r"|^\s*(?:same|the same)\s+(?:for|with)\s+(?P<c>.+?)\s*[?.!]*\s*$"
    r"|^\s*(?P<d>.+?)\s*,?\s+(?:too|as well)\s*[?.!]*\s*$",
    re.IGNORECASE)
_CLAUSE_START = re.compile(
    r"^(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|do|does|did|can|could|should|would|will|"
    r"has|have|had|may|might|must|tell|list|give|name|show|explain|describe)\b", re.IGNORECASE)
_EXISTENTIAL_THERE = re.compile(r"\b(?:is|are|was|were|be|been)\s+there\b|\bthere\s+(?:is|are|was|were|be)\b",
                                re.IGNORECASE)
_MIN_STANDALONE_WORDS = 4


@dataclass(frozen=True)
class _Entity:
    text: str  # as it should be put into a question ("the Atlas budget")
    core: str  # the name itself ("Atlas")
    kind: str  # "person", "place" or "thing"


def subject_of(question: str) -> str | None:
    """The first proper-noun phrase of a question ("Acme Corp", "Project Halcyon"), or None."""
    names = _names(question)
    return names[0].core if names else None


def _tokens(text: str) -> list[tuple[str, int, int]]:
    return [(m.group(0), m.start(), m.end()) for m in _WORD.finditer(text)]


def _is_name_word(word: str, first: bool) -> bool:
    if word.startswith('"'):
        return True
    bare = word.rstrip(".'’").removesuffix("'s").removesuffix("’s")
    if not bare or bare.lower() in _NOT_NAMES:
        return False
    return bare[:1].isupper() or (bare[:1].isdigit() and not first and len(bare) == 4)


def _names(text: str) -> list[_Entity]:
    """Proper-noun phrases of `text` in order, each with the noun it is "the X noun" of and a guessed kind."""
    tokens = _tokens(text)
    found: list[_Entity] = []
    i = 0
    while i < len(tokens):
        word = tokens[i][0]
        sentence_start = i == 0 or text[: tokens[i][1]].rstrip().endswith((".", "?", "!", ":"))
        # "The" inside a sentence opens a title ("on The Jetsons"); at a sentence's start it is just "the".
        title = (word == "The" and not sentence_start and i + 1 < len(tokens)
                 and _is_name_word(tokens[i + 1][0], False) and not text[tokens[i][2]: tokens[i + 1][1]].strip())
        if not title and (not _is_name_word(word, sentence_start) or word[:1].isdigit()):
            i += 1
            continue
        j = _name_end(text, tokens, i + 1)
        start, end = tokens[i][1], tokens[j - 1][2]
        core = text[start:end].rstrip(".'’").removesuffix("'s").removesuffix("’s").strip('"')
        before = text[:start].rstrip().rsplit(" ", 1)[-1].lower() if text[:start].strip() else ""
        following = []
        for word_after, word_start, _ in tokens[j: j + 2]:
            bare = word_after.rstrip(".?!,;:")
            if (text[end: word_start].strip() or not bare.isalpha() or not bare.islower()
                    or bare in _FUNCTION_WORDS or bare.endswith(("ed", "ing"))):
                break
            following.append(bare)
            end = word_start + len(bare)
            if bare != word_after:
                break
        single, i = j == i + 1, j
        # A lone capitalised word right before a common noun is an adjective ("Danish heavy metal band").
        if single and following and before != "the" and not title:
            continue
        kind = "thing" if title or before in _ORG_HINTS or before == "the" else _kind_of(core)
        phrase = core
        if before == "the" and following:  # "the Atlas budget": the budget, named by Atlas
            phrase = f"the {core} {' '.join(following)}"
        elif before == "the":
            phrase = f"the {core}"
        found.append(_Entity(phrase, core, kind))
    return found


def _name_end(text: str, tokens: list[tuple[str, int, int]], j: int) -> int:
    """The index after the last token of a name whose next token is `tokens[j]`."""
    while j < len(tokens):
        if text[tokens[j - 1][2]: tokens[j][1]].strip():  # punctuation ends a name
            break
        if _is_name_word(tokens[j][0], False):
            j += 1
            continue
        # Small words inside a title or a name ("Escape from the Dark", "University of Oslo").
        k = j
        while k < len(tokens) and tokens[k][0].lower() in _NAME_JOINERS and k - j < 2:
            if text[tokens[k][2]: tokens[k + 1][1]].strip() if k + 1 < len(tokens) else True:
                break
            k += 1
        if k > j and k < len(tokens) and _is_name_word(tokens[k][0], False) and not tokens[k][0][:1].isdigit():
            j = k + 1
            continue
        break
    return j


def _kind_of(name: str) -> str:
    words = [w.strip('".,').lower() for w in name.split()]
    if any(w in _ORG_HINTS or w in _PLACE_WORDS or w in _PERSON_WORDS for w in words):
        return "thing"  # an organisation, a place, or a title ("Deputy Prime Minister")
    if name.startswith('"') or any(w[:1].isdigit() for w in words):
        return "thing"
    if 2 <= len(words) <= 4 and all(w[:1].isalpha() for w in words):
        return "person"
    return "thing"


def _is_list(answer: str, entities: list[_Entity]) -> bool:
    """Whether the answer names its entities as a list ("PostgreSQL, MySQL and CSV"), not one with details."""
    # A possessive name describes ("Oettinger Brauerei, Germany's best-selling beer"): it is no list item.
    items = [e for e in entities if not re.search(re.escape(e.core) + r"['’]s\b", answer)]
    if len(items) < 2:
        return False
    first, second = answer.find(items[0].core), answer.find(items[1].core)
    between = answer[first + len(items[0].core): second].strip() if 0 <= first < second else "-"
    return between in (",", "and", ", and", "or", ", or", ";")


def _places(text: str) -> list[_Entity]:
    """Names the text puts something in or at ("... is based in Oslo")."""
    return [e for e in _names(text)
            if re.search(r"\b(?:in|at|from|to|near)\s+(?:the\s+)?" + re.escape(e.core), text)]


# ------------------------------------------------------------------------------------------------ the rewrite

def _rewrite(previous: Rewrite, turn: str) -> Rewrite:
    swapped = _swap(previous, turn)
    if swapped is not None:
        return swapped
    leading = bool(_LEADING.match(turn))
    body = _capitalised(_LEADING.sub("", turn).strip())
    own = _names(body)
    resolved, referents = _resolve_references(previous, body, own)
    if referents:
        subject = next((e.core for e in _names(resolved) if e.kind != "person"), None) or previous.subject
        return Rewrite(resolved, turn, METHOD_REFERENT, subject, referents)
    if own:
        return Rewrite(body if leading else turn, turn, METHOD_UNCHANGED, own[0].core)
    if leading or len(_WORD.findall(body)) < _MIN_STANDALONE_WORDS:
        context = previous.subject or previous.question.rstrip("?. ")
        return Rewrite(f"{body.rstrip()} (regarding: {context})", turn, METHOD_CONTEXT, previous.subject, [context])
    return Rewrite(turn, turn, METHOD_UNCHANGED, previous.subject)


def _candidates(previous: Rewrite) -> dict[str, list[_Entity]]:
    """What a reference in the next turn may point at, by kind, most likely first."""
    asked = _names(previous.question)
    asked_cores = {e.core.lower() for e in asked}
    said = [e for e in _names(previous.answer) if e.core.lower() not in asked_cores
            and e.core.lower() not in previous.question.lower()]
    identity = bool(_IDENTITY_QUESTION.match(previous.question)) and any(e.kind == "person" for e in asked)
    asked_who = bool(_PERSON_QUESTION.match(previous.question)) and not identity
    asked_what = bool(_THING_QUESTION.match(previous.question))
    if identity:
        said = [e for e in said if e.kind != "person"]
    people = [e for e in said if asked_who or e.kind == "person"]
    said_things = [e for e in said if e.kind != "person" or not asked_who]
    people += [e for e in asked if e.kind == "person"]
    things: list[_Entity] = []
    # "it" is what a what/which question's answer named, unless the answer named several (a list: "they").
    if asked_what and not _is_list(previous.answer, said_things):
        things += [_Entity(e.text, e.core, "thing") for e in said_things]
    things += [e for e in asked if e.kind == "thing"]
    things += [e for e in asked if e.kind == "person" and not asked_who]
    places = _places(previous.answer) + [e for e in said if e.kind == "thing"] + _places(previous.question)
    groups = said[:] if asked_who or asked_what else []
    # "that band", "that publisher": what the last answer named, a thing before a person-looking name.
    named = [e for e in said if e.kind != "person"] + [e for e in said if e.kind == "person"]
    if asked_who and len(people) > 1 and people[1] in said:
        joined = " and ".join(e.core for e in people if e in said)
        groups = [_Entity(joined, joined, "group")]
    groups += things
    return {"person": people, "thing": things, "place": places, "group": groups, "named": named + things}


_DEMONSTRATIVE = re.compile(r"\b(?P<det>that|this|the same|these|those)\s+(?P<noun>[a-z]+)\b", re.IGNORECASE)
_BARE_DEMONSTRATIVE = re.compile(r"\b(?P<det>that|this)\b(?=\s*[?.!,]|\s*$)", re.IGNORECASE)
_PRONOUN = re.compile(r"\b(" + "|".join([*_SUBJECT_PRONOUNS, *_POSSESSIVES, "there"]) + r")\b", re.IGNORECASE)


def _resolve_references(previous: Rewrite, body: str, own: list[_Entity]) -> tuple[str, list[str]]:
    """`body` with its references to the exchange replaced, and the phrases put in (none: nothing referred)."""
    candidates = _candidates(previous)
    referents: list[str] = []
    text = body

    def pick(kind: str) -> _Entity | None:
        for key in ([kind] if kind != "group" else ["group"]):
            for entity in candidates.get(key, []):
                if entity.core.lower() not in text.lower():
                    return entity
        return None

    def demonstrative(match: re.Match[str]) -> str:
        noun = match.group("noun").lower()
        if noun in _FUNCTION_WORDS or noun.endswith(("ed", "ing")):
            return match.group(0)
        kind = "person" if noun in _PERSON_WORDS else "place" if noun in _PLACE_WORDS else "named"
        pool = candidates.get(kind, [])
        named = [e for e in pool + candidates["thing"] + candidates["person"] if noun in e.text.lower().split()]
        entity = named[0] if named else (pool[0] if pool else None)
        if entity is None:  # "that team" after "... to the security team": the phrase with that noun
            phrase = _noun_phrase(f"{previous.answer} {previous.question}", noun)
            entity = _Entity(phrase, phrase, kind) if phrase else None
        if entity is None or entity.core.lower() in body.lower():
            return match.group(0)
        referents.append(entity.text)
        return entity.text

    text = _DEMONSTRATIVE.sub(demonstrative, text)

    def pronoun(match: re.Match[str]) -> str:
        word = match.group(1)
        lower = word.lower()
        if lower == "there":
            if _EXISTENTIAL_THERE.search(text[max(0, match.start() - 12): match.end() + 12]):
                return word
            entity = pick("place")
            if entity is None:
                return word
            referents.append(entity.text)
            return f"in {entity.text}"
        kind = _SUBJECT_PRONOUNS.get(lower) or _POSSESSIVES[lower]
        if any(e.kind == kind and text.find(e.core) < match.start() for e in own if e.core in text):
            return word  # the follow-up named its referent before the pronoun: the pronoun points at it
        entity = pick(kind) or (pick("thing") if kind == "group" else None)
        if entity is None:
            return word
        referents.append(entity.text)
        replacement = entity.text
        if lower in _POSSESSIVES or (lower == "her" and _possessive_her(text, match)):
            replacement = f"{entity.text}'s"
        return replacement

    text = _PRONOUN.sub(pronoun, text)
    if not referents:
        match = _BARE_DEMONSTRATIVE.search(text)
        if match and not own:
            entity = pick("thing")
            if entity is not None:
                referents.append(entity.text)
                text = text[: match.start()] + entity.text + text[match.end():]
    text = re.sub(r"\b(?:in|at)\s+in\s+", "in ", text)  # "work at there" -> "work at in Oslo" -> "work in Oslo"
    return _capitalised(text), referents


def _noun_phrase(text: str, noun: str) -> str | None:
    """ "the security team" for "team": the first phrase of `text` ending in the noun, with its modifiers."""
    found = re.search(r"\b(?:the|a|an|its|their)\s+((?:[a-z-]+\s+){0,2})" + re.escape(noun) + r"\b", text)
    if found is None:
        return None
    modifiers = [w for w in found.group(1).split() if w not in _FUNCTION_WORDS]
    return " ".join(["the", *modifiers, noun])


def _possessive_her(text: str, match: re.Match[str]) -> bool:
    """ "her" before a noun is possessive ("her salary"), before a verb's end or a preposition it is not."""
    rest = text[match.end():].lstrip()
    following = rest.split(" ", 1)[0].strip("?.!,").lower() if rest else ""
    return bool(following) and following not in _FUNCTION_WORDS and not rest.startswith(("?", ".", "!", ","))


def _swap(previous: Rewrite, turn: str) -> Rewrite | None:
    """ "What about X?" / "And X?": the previous question asked again about X, or None when the turn is not one."""
    match = _SWAP.match(turn)
    if match is None:
        return None
    other = next(g for g in match.groups() if g).strip().strip("?. ")
    if not other or _CLAUSE_START.match(other) or len(other.split()) > 6:
        return None  # "and when was it founded?" is a question of its own
    if _PRONOUN.search(other) and len(other.split()) > 2:
        return None
    question = previous.question
    replaced = _swapped(question, other)
    if replaced is None:
        asked = _capitalised(_LEADING.sub("", turn).strip())
        return Rewrite(f"{asked} (regarding: {question.rstrip('?. ')})", turn, METHOD_CONTEXT, previous.subject,
                       [other])
    subject = subject_of(other) or previous.subject
    return Rewrite(replaced, turn, METHOD_SWAPPED, subject, [other])


def _swapped(question: str, other: str) -> str | None:
    """`question` with the phrase `other` stands in for replaced by it, or None when none fits."""
    other_names = _names(other)
    if other_names or other[:1].isupper():
        names = _names(question)
        if not names:
            return None
        if len(other_names) < 2 or len(names) < len(other_names):
            return _swap_name(question, names[0].core, other)
        for target, replacement in zip(names, other_names, strict=False):  # "And Ed Roland in Collective Soul?"
            question = _swap_name(question, target.core, replacement.core)
        return question
    words = other.split()
    head = words[-1].lower()
    tokens = _tokens(question)
    lowered = [t[0].lower().strip("?.,!") for t in tokens]
    if head in lowered and len(words) > 1:  # "business class" for "economy class"
        end = lowered.index(head)
        start = max(0, end - len(words) + 1)
        return question[: tokens[start][1]] + other + question[tokens[end][2]:]
    best, best_score = None, 0.0
    for index, (word, _start, _end) in enumerate(tokens):
        bare = word.strip("?.,!")
        lower = bare.lower()
        if (not bare.isalpha() or lower in _FUNCTION_WORDS or lower in _NOT_NAMES or bare[:1].isupper()
                or len(lower) < 3):
            continue
        score = 1.0 + 0.05 * index
        previous_word = lowered[index - 1] if index else ""
        if previous_word in ("for", "on", "of", "about", "with", "to", "in", "the", "a", "an", "by", "per"):
            score += 2
        if lower.endswith("s") == head.endswith("s"):
            score += 1
        if lower.endswith(("ed", "ing", "ly")):
            score -= 2
        following = lowered[index + 1] if index + 1 < len(lowered) else ""
        if following and following not in _FUNCTION_WORDS and following.isalpha():
            score -= 2  # a modifier ("hotel" of "hotel limit"), not the thing asked about
        if score > best_score:
            best, best_score = index, score
    # Only a noun in the place of one ("for meals", "the plan") is swapped; a guess keeps the question as context.
    if best is None or best_score < 3:
        return None
    word, start, end = tokens[best]
    bare_end = start + len(word.rstrip("?.,!"))
    return question[:start] + other + question[bare_end:]


def _swap_name(question: str, name: str, other: str) -> str:
    """`question` with `name` replaced by `other` ("the Atlas budget" asked about "Orion": only the name goes)."""
    at = question.find(name)
    before, after = question[:at], question[at + len(name):]
    if after.startswith(("'s", "’s")):
        other = other.removesuffix("'s").removesuffix("’s")
    if before.lower().endswith("the ") and other.lower().startswith("the "):
        other = other[4:]
    return before + other + after


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


# -------------------------------------------------------------------------------------------------- by a model

LLM_REWRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"question": {"type": "string", "maxLength": _LLM_MAX_QUESTION_CHARS}},
    "required": ["question"],
    "additionalProperties": False,
}

_PROMPT = """Rewrite the user's last question so that it can be understood without the conversation.
Replace every pronoun or reference ("it", "she", "that person", "there", "what about ...") with what it refers
to, taken from the earlier questions or answers. Keep the question's meaning and do not answer it.
Reply with JSON: {{"question": "<the standalone question>"}}.

Conversation:
{exchange}

Last question: {question}"""


def llm_rewrite(turns: Sequence[Turn], deterministic: Rewrite, chat_generator: Any) -> Rewrite:
    """A model's standalone question, or `deterministic` (with the reason) when the model's cannot be used."""
    from docqa.errors import LLMUnavailableError
    from docqa.llm.calls import generate_json

    earlier = list(turns[:-1])[-_LLM_TURNS:]
    exchange = "\n".join(f"{t.role.capitalize()}: {t.content[:_LLM_TURN_CHARS]}" for t in earlier)
    prompt = _PROMPT.format(exchange=exchange, question=turns[-1].content[:_LLM_TURN_CHARS])
    try:
        data = generate_json(chat_generator, prompt, LLM_REWRITE_SCHEMA, name="standalone_question",
                             max_tokens=96, purpose="conversation_rewrite")
    except LLMUnavailableError as exc:
        deterministic.rejected = f"the rewrite model is unavailable: {exc.message}"
        return deterministic
    text = data.get("question") if isinstance(data, dict) else None
    reason = check_llm_question(text, deterministic)
    if reason is not None:
        deterministic.rejected = reason
        return deterministic
    assert isinstance(text, str)
    question = " ".join(text.split())
    return Rewrite(question, deterministic.original, METHOD_LLM, subject_of(question) or deterministic.subject,
                   list(deterministic.referents), deterministic.history)


def check_llm_question(text: Any, deterministic: Rewrite) -> str | None:
    """Why a model's rewrite cannot stand in for the deterministic one, or None when it can."""
    if not isinstance(text, str) or not text.strip():
        return "the model gave no question"
    if "\n" in text.strip() or len(text) > _LLM_MAX_QUESTION_CHARS:
        return "the model's reply is not one question"
    if re.search(r"\b(?:user|assistant)\s*:", text, re.IGNORECASE):
        return "the model repeated the conversation"
    lower = " ".join(text.lower().split())
    missing = [r for r in deterministic.referents if r.lower().removeprefix("the ") not in lower]
    if missing:
        return f"the model's question {text.strip()!r} drops {', '.join(repr(m) for m in missing)}"
    return None


# The built-in check `auto` runs once per endpoint: a model that resolves these is trusted with rewrites.
_CHECK_CONVERSATIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Who chairs the Orion committee?", "Priya Raman chairs it.", "When did she take over?"), "priya raman"),
    (("Which company acquired Nimbus Labs?", "Kestrel Systems acquired Nimbus Labs in 2019.",
      "Where is that company based?"), "kestrel"),
    (("What is the refund limit for meals?", "Meals are refunded up to 60 euros a day.", "What about taxis?"),
     "taxi"),
)
_check_lock = threading.Lock()
_check_results: dict[str, bool] = {}


def passes_rewrite_check(chat_generator: Any, endpoint: str) -> bool:
    """Whether the model behind `endpoint` rewrites the built-in follow-ups right (asked once per process)."""
    with _check_lock:
        if endpoint in _check_results:
            return _check_results[endpoint]
    from docqa.errors import LLMUnavailableError

    passed = 0
    try:
        for texts, expected in _CHECK_CONVERSATIONS:
            turns = [Turn("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
            rewrite = llm_rewrite(turns, deterministic_rewrite(turns), chat_generator)
            passed += rewrite.method == METHOD_LLM and expected in rewrite.question.lower()
    except LLMUnavailableError:
        passed = 0
    ok = passed == len(_CHECK_CONVERSATIONS)
    with _check_lock:
        _check_results[endpoint] = ok
    return ok
