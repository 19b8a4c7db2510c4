"""Symbolic comparison of two final answers, in a process of its own.

`maths.MathChecker` starts this file as a script (``python -I -u math_worker.py``) and talks to
it over pipes, one JSON object a line: ``{"answer": "...", "expected": "..."}`` in,
``{"equal": bool}`` or ``{"error": "..."}`` out, after a first ``{"ready": true}`` once it has
started. It runs in its own process because sympy can take unbounded time or memory on some
inputs (``9^{9^{9^9}}``): the parent kills it at the time limit and starts another, and its
address space is capped.

The script imports nothing of the project, so it runs whatever the parent's ``sys.path``.
Reading and comparing is Hugging Face's math-verify: its LaTeX grammar (latex2sympy2_extended,
an ANTLR parser that builds sympy objects without evaluating the text as Python; its fallback for
plain expressions hands sympy's ``parse_expr`` only digits, operators and parentheses) and its
comparison (numbers to 6 decimal places, expressions whose difference simplifies to zero,
equations by their value, sets, intervals, tuples, matrices). Its own time limits
are off (they use ``SIGALRM`` and answer False when they fire): the parent's limit applies, so a
runaway comparison is reported as a timeout rather than as a wrong answer.

What math-verify decides differently from the translation this module held before (checked on
every case of the match tests, all of which agree; these are pinned in
``tests/rewards/terms/test_match.py``):

- a parenthesised list is ordered: ``(1, 2)`` is a point or an open interval and differs from
  ``(2, 1)`` (the old translation accepted any order for short lists); a bare ``1, 2`` and
  ``\\{1, 2\\}`` are sets and match in any order;
- sets, intervals (``[1, 2)``), matrices and ``\\ln e`` are read, where the old translation
  refused them as unsupported and scored 0.

The reading depends on the ANTLR runtime: latex2sympy2_extended ships a parser generated for
each of 4.9.3, 4.11 and 4.13.2, and they differ (under 4.13.2 ``50\\%`` reads as ``0.5``, under
4.9.3 as ``50``). Both environments pin 4.9.3, the version verl's configuration library needs,
so a rollout scores the same under TRL and under verl.
"""

from __future__ import annotations

import json
import logging
import resource
import sys
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

# The worker's address-space cap: sympy and math-verify need ~150 MiB.
MEMORY_LIMIT_BYTES = 1 << 30
# The whole answer is the final answer already (the match term extracted it), so a `\boxed{}`
# inside it is taken first and plain numbers or expressions are the fallback.
_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
    # math-verify warns once that its time limits are off; the parent keeps the time.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # The first comparison loads the parser's grammar and sympy's lazy modules (about 20 times
    # the cost of the next one): do it before saying ready, so that it counts against the start's
    # time limit and not against the first rollout's.
    equivalent(r"\sqrt{4}", "2")
    _reply({"ready": True})
    for line in sys.stdin:
        try:
            request = json.loads(line)
            equal = equivalent(str(request["answer"]), str(request["expected"]))
            _reply({"equal": equal})
        except Exception as exc:  # a reply for every request, whatever went wrong
            _reply({"error": f"{type(exc).__name__}: {exc}"})


def equivalent(answer: str, expected: str) -> bool:
    """Whether a final answer is the expected one as a mathematical object. An answer that
    cannot be read is equal to nothing. Not symmetric: an equation in `answer` counts by its
    value (``x = 5`` answers ``5``)."""
    gold, given = read(expected), read(answer)
    if not gold or not given:
        return False
    return bool(verify(gold, given, timeout_seconds=None))


def read(answer: str) -> list[Any]:
    """`answer` as math-verify's parsed forms (sympy objects), empty when it cannot be read.

    The answer is LaTeX or plain text without its math delimiters; they are put back (any
    ``$`` inside dropped) because math-verify reads LaTeX only between delimiters."""
    body = answer.replace("\\$", "").replace("$", "").strip()
    if not body:
        return []
    parsed: list[Any] = parse(
        f"${body}$",
        extraction_config=_EXTRACTION,
        fallback_mode="no_fallback",
        parsing_timeout=None,
    )
    return parsed


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
