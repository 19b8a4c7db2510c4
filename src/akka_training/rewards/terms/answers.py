"""Pulling the answer out of a completion: final numbers, boxed answers, JSON objects.

Pure functions shared by the ``match`` modes; none of them raises on odd text.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any

# A number as people write it in a final answer: sign, thousands separators, decimals,
# optional leading dollar sign (GSM8K answers such as "#### $1,200").
_NUMBER = r"[-+]?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?"
_NUMBER_RE = re.compile(rf"^\s*({_NUMBER})\s*\.?\s*$")
_AFTER_HASHES_RE = re.compile(rf"####\s*({_NUMBER})")
_FENCED_JSON_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
_ANSWER_PREFIX_RE = re.compile(r"(?i)^(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*")


def parse_number(text: str) -> Fraction | None:
    """`text` as an exact number when it is one number (``1,200``, ``-3.50``, ``$7``)."""
    match = _NUMBER_RE.match(text)
    if not match:
        return None
    return _to_fraction(match.group(1))


def final_number(completion: str) -> Fraction | None:
    """The number after the last ``####`` of a completion, or None when there is none."""
    found = None
    for match in _AFTER_HASHES_RE.finditer(completion):
        found = match.group(1)
    return _to_fraction(found) if found is not None else None


def expected_number(expected: str) -> Fraction | None:
    """The expected answer's number: the one after its last ``####``, else the whole text as a
    bare number."""
    if "####" in expected:
        return final_number(expected)
    return parse_number(expected)


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def final_answer(text: str) -> str:
    """The final answer of a completion or an expected answer, for symbolic comparison: the
    last ``\\boxed{}``, else what follows the last ``####`` (to the end of its line), else the
    last non-empty line without an "The answer is" prefix."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else ""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return _ANSWER_PREFIX_RE.sub("", lines[-1]).strip()


def json_object(text: str) -> dict[str, Any] | None:
    """The JSON object a completion holds: the last fenced ```json block that parses, else
    the whole text, else the span from the first ``{`` to the last ``}``."""
    candidates = [m.group(1) for m in _FENCED_JSON_RE.finditer(text)][::-1]
    candidates.append(text)
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        candidates.append(text[first : last + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def same_json_value(expected: Any, actual: Any) -> bool:
    """Whether a completion's field value matches the expected one: strings ignoring case and
    surrounding space, numbers by value (``1 == 1.0``, never ``True == 1``), lists and objects
    element by element."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return float(expected) == float(actual)
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip().casefold() == actual.strip().casefold()
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            same_json_value(e, a) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            same_json_value(v, actual[k]) for k, v in expected.items()
        )
    return bool(expected == actual)


def _to_fraction(raw: str) -> Fraction | None:
    cleaned = raw.replace(",", "").replace("$", "").replace(" ", "")
    if cleaned in {"", "+", "-", "."}:
        return None
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None
