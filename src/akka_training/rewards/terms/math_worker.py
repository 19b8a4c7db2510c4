"""Symbolic comparison of two final answers, in a process of its own.

`maths.MathChecker` starts this file as a script (``python -I -u math_worker.py``) and talks to
it over pipes, one JSON object a line: ``{"a": "...", "b": "..."}`` in, ``{"equal": bool}`` or
``{"error": "..."}`` out, after a first ``{"ready": true}`` once it has started. It runs in
its own process because sympy can take unbounded time or memory on some inputs (``9^{9^{9^9}}``):
the parent kills it at the time limit and starts another, and its address space is capped.

The script imports nothing of the project, so it runs whatever the parent's ``sys.path``.
Answers are translated from LaTeX into a small, checked subset of sympy syntax before parsing:
only digits, operators, parentheses, single-letter symbols and a short list of function names
pass, so ``parse_expr`` (which evaluates Python) never sees anything else.
"""

from __future__ import annotations

import itertools
import json
import re
import resource
import sys
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

# The worker's address-space cap: sympy itself needs ~150 MiB.
MEMORY_LIMIT_BYTES = 1 << 30
RELATIVE_TOLERANCE = 1e-6
MAX_LIST_PERMUTED = 6

_FUNCTIONS = {"sqrt", "log", "exp", "sin", "cos", "tan", "pi", "oo", "Abs"}
_LATEX_WORDS = {
    r"\cdot": "*",
    r"\times": "*",
    r"\div": "/",
    r"\pi": " pi ",
    r"\infty": " oo ",
    r"\ln": " log",
    r"\log": " log",
    r"\exp": " exp",
    r"\sin": " sin",
    r"\cos": " cos",
    r"\tan": " tan",
}
_DROP = [
    r"\left",
    r"\right",
    r"\!",
    r"\,",
    r"\;",
    r"\:",
    r"\ ",
    "~",
    r"\$",
    "$",
    r"\(",
    r"\)",
    r"\[",
    r"\]",
]
_THOUSANDS_RE = re.compile(r"^[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_SAFE_RE = re.compile(r"^[0-9A-Za-z+\-*/().,\s]*$")
_WORD_RE = re.compile(r"[A-Za-z]+")


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    _reply({"ready": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            _reply({"equal": equivalent(str(request["a"]), str(request["b"]))})
        except Exception as exc:  # a reply for every request, whatever went wrong
            _reply({"error": f"{type(exc).__name__}: {exc}"})


def equivalent(a: str, b: str) -> bool:
    """Whether two answers are the same mathematical object: numbers within a relative
    tolerance, expressions whose difference simplifies to zero, lists element by element (in
    any order for short lists)."""
    left, right = _split_top_level(to_sympy_syntax(a)), _split_top_level(to_sympy_syntax(b))
    if len(left) != len(right):
        return False
    exprs_a = [_parse(x) for x in left]
    exprs_b = [_parse(x) for x in right]
    if all(_same(x, y) for x, y in zip(exprs_a, exprs_b, strict=True)):
        return True
    if len(exprs_a) > MAX_LIST_PERMUTED:
        return False
    return any(
        all(_same(x, y) for x, y in zip(exprs_a, perm, strict=True))
        for perm in itertools.permutations(exprs_b)
    )


def to_sympy_syntax(answer: str) -> str:
    """Translate a LaTeX-ish answer into sympy syntax; raises ValueError for anything outside
    the accepted subset."""
    text = answer.strip()
    for token in _DROP:
        text = text.replace(token, "")
    text = re.sub(r"\\(?:text|mathrm|textbf|mbox|operatorname)\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\^\s*\{?\\circ\}?", "", text).replace("\\%", "").replace("%", "")
    text = text.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac")
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\sqrt(\d+)", r"\\sqrt{\1}", text)
    text = _replace_frac_sqrt(text)
    for word in sorted(_LATEX_WORDS, key=len, reverse=True):
        text = text.replace(word, _LATEX_WORDS[word])
    if "=" in text:  # "x = 5": the value is the right-hand side
        text = text.rsplit("=", 1)[1]
    text = text.strip().rstrip(".").strip()
    if _THOUSANDS_RE.match(text):
        text = text.replace(",", "")
    text = text.replace("{", "(").replace("}", ")").replace("^", "**")
    if not _SAFE_RE.match(text) or "\\" in text:
        raise ValueError(f"unsupported characters in {answer!r}")
    for word in _WORD_RE.findall(text):
        if len(word) > 1 and word not in _FUNCTIONS:
            raise ValueError(f"unsupported name {word!r}")
    if re.search(r"[A-Za-z)]\s*\.", text):  # attribute access never reaches parse_expr
        raise ValueError("unsupported '.' after a name")
    return text


def _replace_frac_sqrt(text: str) -> str:
    """``\\frac{a}{b}`` -> ``((a)/(b))``, ``\\sqrt[n]{x}`` -> ``((x)**(1/(n)))``,
    ``\\sqrt{x}`` -> ``sqrt(x)``, innermost first."""
    while True:
        i = max(text.rfind(r"\frac{"), text.rfind(r"\sqrt{"), text.rfind(r"\sqrt["))
        if i < 0:
            return text
        if text.startswith(r"\frac{", i):
            num, j = _group(text, i + len(r"\frac"), "{", "}")
            den, k = _group(text, j, "{", "}")
            text = f"{text[:i]}(({num})/({den})){text[k:]}"
        elif text.startswith(r"\sqrt[", i):
            index, j = _group(text, i + len(r"\sqrt"), "[", "]")
            body, k = _group(text, j, "{", "}")
            text = f"{text[:i]}(({body})**(1/({index}))){text[k:]}"
        else:
            body, k = _group(text, i + len(r"\sqrt"), "{", "}")
            text = f"{text[:i]}sqrt({body}){text[k:]}"


def _group(text: str, start: int, open_: str, close: str) -> tuple[str, int]:
    if start >= len(text) or text[start] != open_:
        raise ValueError(f"expected {open_!r} at {start}")
    depth = 0
    for j in range(start, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return text[start + 1 : j], j + 1
    raise ValueError("unbalanced braces")


def _split_top_level(text: str) -> list[str]:
    """Split a list answer (``1, 2`` or ``(1, 2)``) at its top-level commas."""
    stripped = text.strip()
    if stripped.startswith("(") and stripped.endswith(")") and "," in stripped:
        inner, end = _group(stripped, 0, "(", ")")
        if end == len(stripped):
            stripped = inner
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in stripped:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def _parse(text: str) -> Any:
    if not text:
        raise ValueError("empty answer")
    names: dict[str, Any] = {w: sympy.Symbol(w) for w in _WORD_RE.findall(text) if len(w) == 1}
    transformations = (*standard_transformations, implicit_multiplication_application)
    return parse_expr(text, local_dict=names, transformations=transformations, evaluate=True)


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    if a.is_number and b.is_number:
        va, vb = complex(sympy.N(a, 30)), complex(sympy.N(b, 30))
        return abs(va - vb) <= RELATIVE_TOLERANCE * max(1.0, abs(vb))
    return bool(sympy.simplify(a - b) == 0)


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
