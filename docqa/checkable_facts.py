"""The facts a sentence states that can be checked against text without a model: numbers, dates and names.

Values are normalised so that ordinary variation compares equal: `1,000` / `1000` / `1 000`, `EUR 5,000` /
`€5000` / `5000 euros` (the amount is the number; the currency word need not match), `12%` / `12 percent`,
`March 2021` / `2021-03` / `03/2021`, case and punctuation. A text's `FactIndex` holds every value it states
(dates also as their year and month, numbers written as words up to twenty and the tens), so a sentence's fact is
supported when its value, or one of its readings, is in the index.

Usage:
    index = FactIndex.of("The hotel limit is EUR 5,000 per night since March 2021.")
    facts = sentence_facts("Hotels are capped at €5000 (2021-03).")
    [f for f in facts if not index.supports(f)]   # -> []
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


def _wordlist(text: str) -> list[str]:
    return text.split()


_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        _wordlist("january february march april may june july august september october november december")
    )
}
_MONTHS.update({name[:3]: number for name, number in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_MONTH = (
    r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DATE_PATTERNS = (
    # 2021-03-15, 2021/03/15, 2021-03
    re.compile(r"\b(?P<year>(?:1[5-9]|20)\d{2})[-/.](?P<num>\d{1,2})(?:[-/.](?P<day>\d{1,2}))?\b"),
    # 15/03/2021, 03/15/2021, 03/2021, 15.03.2021
    re.compile(r"\b(?:(?P<a>\d{1,2})[/.-])?(?P<num>\d{1,2})[/.-](?P<year>(?:1[5-9]|20)\d{2})\b"),
    # 15 March 2021, March 15, 2021, March 2021, 15th of March 2021
    re.compile(
        r"\b(?:(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?)?"
        + _MONTH
        + r"(?:\s+(?P<day2>\d{1,2})(?:st|nd|rd|th)?,?)?\s+(?P<year>(?:1[5-9]|20)\d{2})\b",
        re.IGNORECASE,
    ),
)
# Thousands grouped by comma, point, space (also no-break and thin) or apostrophe; decimals after a point or a comma.
_NUMBER = re.compile(
    r"(?<![\w.,])(?P<int>\d{1,3}(?:(?P<sep>[,.\u00a0\u202f' ])\d{3})+|\d+)(?P<frac>[.,]\d+)?"
    r"(?P<ord>st|nd|rd|th)?(?!\w)"
)
_MARKER = re.compile(r"\[\d{1,4}(?:\s*,\s*\d{1,4})*\]")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        _wordlist(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
            "seventeen eighteen nineteen twenty"
        )
    )
}
_TENS = _wordlist("thirty forty fifty sixty seventy eighty ninety")
_NUMBER_WORDS.update({w: 10 * (i + 3) for i, w in enumerate(_TENS)})
_NUMBER_WORDS.update({"hundred": 100, "thousand": 1000, "million": 1_000_000, "dozen": 12, "once": 1, "twice": 2})
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*", re.UNICODE)
_CAPITALIZED = re.compile(r"(?<![\w'’-])(?P<word>[A-Z][^\W\d_]*(?:[-'’][A-Za-z][^\W\d_]*)*)(?![\w])")
# Capitalised without being names: pronoun, titles, calendar words, currencies, labels small models write.
_NOT_NAMES = frozenset(
    _wordlist("""
i i'm i've i'd i'll ok yes no not note answer summary question reasoning source sources passage passages document
documents mr mrs ms dr prof sir st the a an and or but if in on at to of for by with from as is are was were be
this that these those it its he she they we you his her their our your my me him them who what when where why how
which there here however therefore also according based
monday tuesday wednesday thursday friday saturday sunday
january february march april may june july august september october november december
eur usd gbp chf jpy cad aud euro euros dollar dollars pound pounds
""")
)


@dataclass(frozen=True)
class Fact:
    """One checkable fact of a sentence: `kind` is "number", "date" or "name"; `readings` its normalised values
    (any one supported is enough); `text` as written."""

    kind: str
    text: str
    readings: tuple[str, ...]


@dataclass
class FactIndex:
    """Every normalised value a text states (numbers, dates and their parts, words in lower case)."""

    values: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, *texts: str) -> FactIndex:
        index = cls()
        for text in texts:
            index.add(text)
        return index

    def add(self, text: str) -> None:
        text = _MARKER.sub(" ", text or "")
        for date in _dates(text):
            self.values.update(date.readings)
            # "March 2021" also states the year (and "2021-03-15" the month).
            for reading in date.readings:
                parts = reading[2:].split("-")
                self.values.add("d:" + parts[0])
                self.values.add("n:" + parts[0].lstrip("0"))
                if len(parts) > 1:
                    self.values.add("d:" + "-".join(parts[:2]))
        for number in _numbers(text, spaced_groups=True):
            self.values.update(number.readings)
        for number in _numbers(text, spaced_groups=False):
            self.values.update(number.readings)
        for word in _WORD.findall(text.lower()):
            word = _plain(word)
            self.words.add(word)
            self.words.update(word.split("-"))
            # "two-time" states the number two, as "two" does.
            for part in {word, *word.split("-")}:
                if part in _NUMBER_WORDS:
                    self.values.add(f"n:{_NUMBER_WORDS[part]}")

    def supports(self, fact: Fact) -> bool:
        if fact.kind == "name":
            return any(reading in self.words for reading in fact.readings)
        return any(reading in self.values for reading in fact.readings)


def sentence_facts(sentence: str) -> list[Fact]:
    """The checkable facts of one sentence: dates first (their digits are not numbers again), then numbers and
    proper names (capitalised words other than the first, outside the common-word list)."""
    text = _MARKER.sub(" ", sentence)
    facts: list[Fact] = []
    dates = _dates(text)
    facts.extend(dates)
    for date in dates:
        text = text.replace(date.text, " " * len(date.text), 1)
    facts.extend(_numbers(text, spaced_groups=True))
    facts.extend(_names(text))
    return facts


def _dates(text: str) -> list[Fact]:
    found: list[Fact] = []
    taken: list[tuple[int, int]] = []
    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            readings = _date_readings(match)
            if readings:
                taken.append(match.span())
                found.append(Fact("date", match.group(0), readings))
    return found


def _date_readings(match: re.Match[str]) -> tuple[str, ...]:
    groups = match.groupdict()
    year = int(groups["year"])
    if groups.get("month"):
        month_word = groups["month"].lower().rstrip(".")
        month = _MONTHS.get(month_word) or _MONTHS.get(month_word[:3])
        day = groups.get("day") or groups.get("day2")
        candidates = [(month, int(day) if day else None)]
    elif groups.get("a") is not None:
        a, b = int(groups["a"]), int(groups["num"])
        # 03/04/2021 is 3 April in Europe and March 4 in the US: either reading may be the passage's.
        candidates = [(b, a), (a, b)]
    elif "day" in groups:
        candidates = [(int(groups["num"]), int(groups["day"]) if groups.get("day") else None)]
    else:
        candidates = [(int(groups["num"]), None)]
    readings = []
    for month, day in candidates:
        if month is None or not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
            continue
        readings.append(f"d:{year:04d}-{month:02d}" + (f"-{day:02d}" if day is not None else ""))
    return tuple(dict.fromkeys(readings))


def _numbers(text: str, *, spaced_groups: bool) -> list[Fact]:
    found = []
    for match in _NUMBER.finditer(text):
        whole, sep = match.group("int"), match.group("sep")
        if sep and sep != "," and not spaced_groups:
            # The same digits read as separate numbers ("3 100 pages" may be 3 and 100).
            found.extend(_numbers(whole.replace(sep, " , "), spaced_groups=True))
            continue
        digits = re.sub(r"\D", "", whole) if sep else whole
        frac = match.group("frac") or ""
        readings = _number_readings(digits, frac, sep)
        if sep == "." and not frac and whole.count(".") == 1:
            # "5.000" is five thousand in Europe and five elsewhere.
            readings += _number_readings(whole.split(".")[0], "." + whole.split(".")[1], None)
        found.append(Fact("number", match.group(0).strip(), readings))
    return found


def _number_readings(digits: str, frac: str, sep: str | None) -> tuple[str, ...]:
    value = digits.lstrip("0") or "0"
    if not frac:
        return (f"n:{value}",)
    decimals = frac[1:].rstrip("0")
    if frac[0] == "," and not sep and len(frac) == 4:
        # "5,000" is five thousand; "5,00" and "2,5" are decimal commas.
        return (f"n:{(digits + frac[1:]).lstrip('0') or '0'}",)
    return (f"n:{value}" + (f".{decimals}" if decimals else ""),)


def _names(text: str) -> list[Fact]:
    found = []
    for match in _CAPITALIZED.finditer(text):
        word = match.group("word")
        before = text[: match.start()].rstrip()
        # The first word of a sentence, a line or a clause after a colon is capitalised for grammar, not as a name.
        if not re.search(r"[A-Za-z0-9]", before) or before.endswith((":", ";", '"', "“", "(", "-", "•")):
            continue
        plain = _plain(word.lower())
        if plain in _NOT_NAMES or len(plain) < 2:
            continue
        readings = {plain, *plain.split("-")} if "-" in plain else {plain}
        if plain.endswith("s") and len(plain) > 3:
            readings.add(plain[:-1])
        found.append(Fact("name", word, tuple(sorted(readings))))
    return found


def _plain(word: str) -> str:
    word = word.replace("’", "'")
    return word[:-2] if word.endswith("'s") else word.strip("'")


# ---- the kind of answer a question asks for -------------------------------------------------------------------
KIND_YES_NO, KIND_NAME, KIND_DATE, KIND_NUMBER = "yes_no", "name", "date", "number"
EXPECTED = {
    KIND_YES_NO: "yes or no in its first sentence",
    KIND_NAME: "a name the question does not hold",
    KIND_DATE: "a date or year the question does not hold",
    KIND_NUMBER: "a number or amount the question does not hold",
}
_AUX = r"(?:is|are|was|were|am|do|does|did|can|could|has|have|had|will|would|should|shall|may|might|must)"
# Matched at the question's start. A clause "When the team moved, who ..." does not ask when: `when` must be
# followed by an auxiliary.
_ASKS = (
    (KIND_YES_NO, re.compile(rf"(?:{_AUX}(?:n['’]t)?|won['’]t|can['’]t|cannot)\b", re.IGNORECASE)),
    (KIND_NAME, re.compile(r"(?:(?:to|by|for|with|from|of|about|after|before) )?who(?:m|se)?\b", re.IGNORECASE)),
    (KIND_DATE, re.compile(rf"when {_AUX}\b|(?:(?:in|during|by|since) )?(?:what|which) year\b", re.IGNORECASE)),
    (KIND_NUMBER, re.compile(r"how (?:many|much)\b", re.IGNORECASE)),
)
# "A or B?" offers a choice; "shot in or around Leland" joins two prepositions and offers none.
_PREPOSITIONS = frozenset(_wordlist("in on at near around about before after by within over under inside outside"))
_OR = re.compile(r"(\w+)?\W*\bor\b\W*(\w+)?", re.IGNORECASE)
# "Do Lafzon Ki Kahani, ... released in which year?" starts like a yes/no question but asks something else.
_WH = re.compile(r"\b(?:what|which|whom?|whose|when|where|why|how)\b", re.IGNORECASE)
# A When question may be answered by a season, a period or an event ("the middle of the summer", "the Maryland
# Toleration Act", "after the war") rather than a date.
_TIME_WORDS = frozenset(
    _wordlist("""
spring summer autumn fall winter monsoon season century centuries decade decades millennium era age period reign
dynasty morning afternoon evening night noon midnight dawn dusk weekend week holiday christmas easter
act war wars revolution treaty battle election crisis depression renaissance independence rebellion uprising
olympics games cup championship conference council empire administration presidency invasion occupation
""")
)
# An answer may say that the passages do not tell ("unknown", "The passages do not say"): an honest answer of any
# kind, which the rule keeps.
_ABSTAINS = re.compile(
    r"\b(?:unknown|unclear|uncertain|insufficient|(?:do|does|did|can)(?:n['’]t| not)|cannot|not (?:known|stated|"
    r"mentioned|given|specified|found|provided|clear|possible|available)|no (?:information|answer|mention|passage|"
    r"data|record|evidence))\b",
    re.IGNORECASE,
)
# How many / How much answered without digits or a number word.
_AMOUNT_WORDS = frozenset(
    _wordlist("none hundreds thousands millions billions dozens half third quarter double triple several few")
)
_YES_NO = re.compile(r"\b(?:yes|no|not|never|neither|nor)\b|n['’]t\b", re.IGNORECASE)
_DECADE = re.compile(r"\b\d{1,4}0['’]?s\b|['’]\d0s\b")
# "one of the largest chains" ranks a member of a group, it counts nothing ("one of the stores" does count).
_ONE_OF = re.compile(
    r"\bone of (?:the|its|his|her|their|our) (?:[a-z]+est|most|best|first|leading|top|main|major|world's)\b",
    re.IGNORECASE,
)


def _offers_choice(question: str) -> bool:
    return any(not ((m.group(1) or "").lower() in _PREPOSITIONS and (m.group(2) or "").lower() in _PREPOSITIONS)
               for m in _OR.finditer(question))


def abstains(sentence: str) -> bool:
    """Whether a sentence says the answer is not known ("unknown", "The passages do not say")."""
    return bool(_ABSTAINS.search(sentence))


def question_kind(question: str) -> str | None:
    """The kind of answer a question asks for (`yes_no`, `name`, `date`, `number`), or None when no deterministic
    rule applies. A choice ("A or B?") is None for every kind: its answer may be a name or a date the question
    already holds."""
    text = re.sub(r"^[\W_]+", "", question or "")
    if _offers_choice(text):
        return None
    kind = next((kind for kind, pattern in _ASKS if pattern.match(text)), None)
    if kind == KIND_YES_NO and _WH.search(text):
        return None
    return kind


def gives_kind(kind: str, question: str, sentences: list[str]) -> bool:
    """Whether an answer's sentences give the kind of answer `question_kind` found: yes or no (or a negation) in
    the first sentence; a capitalised name, a date or year, a number or amount that the question does not hold. A
    first sentence saying the answer is not known ("unknown", "The passages do not say") passes.
    Kept loose on purpose: a right answer must never fail, so any new capitalised word counts as a name and any
    new number as a date."""
    if any(_ABSTAINS.search(sentence) for sentence in sentences[:1]):
        return True
    if kind == KIND_YES_NO:
        first = _MARKER.sub(" ", sentences[0]) if sentences else ""
        # "Are A and B both directors?" is answered by "Both are directors."
        both = re.search(r"\bboth\b", question, re.IGNORECASE) and re.search(r"\bboth\b", first, re.IGNORECASE)
        return bool(_YES_NO.search(first) or both)
    text = _MARKER.sub(" ", " ".join(sentences))
    asked = FactIndex.of(question)
    if kind == KIND_NAME:
        return any(name not in asked.words for name in _capitalised(text))
    said = FactIndex.of(_ONE_OF.sub(" ", text) if kind == KIND_NUMBER else text)
    if kind == KIND_NUMBER:
        return any(value.startswith("n:") and value not in asked.values for value in said.values) or bool(
            (said.words & _AMOUNT_WORDS) - asked.words
        )
    if kind == KIND_DATE:
        months = {word for word in said.words if word in _MONTHS and word != "may"}
        return (
            any(value not in asked.values for value in said.values)
            or bool((months | (said.words & _TIME_WORDS)) - asked.words)
            or any(d.group(0) not in question for d in _DECADE.finditer(text))
        )
    return True


def _capitalised(text: str) -> list[str]:
    """Every capitalised word of a text outside the common-word list, the first of a sentence too ("Telemann.")."""
    words = (_plain(word.lower()) for word in _WORD.findall(text) if word[0].isupper())
    return [word for word in words if word not in _NOT_NAMES and len(word) > 1]
