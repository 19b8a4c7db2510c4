"""The ``match`` term: the completion against the row's expected answer.

Modes (``mode`` in the plan):

- ``exact``: 1 when the completion equals the expected answer, surrounding whitespace ignored.
- ``contains``: 1 when the expected answer (stripped) occurs in the completion.
- ``final-number``: 1 when the number after the completion's last ``####`` equals the expected
  answer's number (the one after its ``####``, or the answer itself as a bare number), compared
  exactly by value (``1,200`` = ``1200.0``). No ``####`` in the completion scores 0.
- ``json-label-match``: the share of the expected JSON object's fields whose values the JSON
  object in the completion (bare or in a fenced ```json block) matches; strings ignore case and
  surrounding space, numbers compare by value. An unreadable completion scores 0; an expected
  object without fields scores 1 for any object.
- ``math``: 1 when the final answers (last ``\\boxed{}``, else after the last ``####``, else the
  last line) are equal as strings, as numbers, or symbolically (math-verify, in a worker process
  with a time limit: a comparison that outlives it fails with cause ``timeout``).

A row without an expected answer (or, for ``json-label-match``, whose expected answer is not a
JSON object) fails with cause ``error``: that is a dataset problem, not a wrong completion.
"""

from __future__ import annotations

import json
import re

from akka_training.core.plans import MatchTerm
from akka_training.rewards.inputs import FailureCause, RolloutInput, TermFailed, TermOutcome
from akka_training.rewards.terms import answers
from akka_training.rewards.terms.base import SyncGrader
from akka_training.rewards.terms.maths import MathChecker

# Spelling-only differences in LaTeX answers that need no symbolic check.
_LATEX_NOISE_RE = re.compile(r"\\left|\\right|\\!|\\,|\\;|\\:|\$|\s")


class MatchGrader(SyncGrader):
    kind = "match"

    def __init__(self, spec: MatchTerm, *, math_checker: MathChecker | None = None) -> None:
        super().__init__(spec.name, spec.weight)
        self.mode = spec.mode
        self.batched = spec.mode != "math"
        # Only the math mode needs math-verify workers; they start on the first symbolic
        # comparison.
        self._owns_math = spec.mode == "math" and math_checker is None
        self._math = MathChecker() if self._owns_math else math_checker

    def evaluate(self, rollout: RolloutInput) -> TermOutcome:
        expected = rollout.expected
        if expected is None:
            raise TermFailed(FailureCause.ERROR, "the row has no expected answer to match")
        completion = rollout.completion
        if self.mode == "exact":
            return TermOutcome(float(completion.strip() == expected.strip()))
        if self.mode == "contains":
            return TermOutcome(float(expected.strip() in completion))
        if self.mode == "final-number":
            return TermOutcome(_final_number(completion, expected))
        if self.mode == "json-label-match":
            return _json_labels(completion, expected)
        return TermOutcome(self._math_value(completion, expected))

    def close(self) -> None:
        if self._owns_math and self._math is not None:
            self._math.close()

    def _math_value(self, completion: str, expected: str) -> float:
        got, want = answers.final_answer(completion), answers.final_answer(expected)
        if not got or not want:
            return 0.0
        if _plain(got) == _plain(want):
            return 1.0
        got_number, want_number = answers.parse_number(got), answers.parse_number(want)
        if got_number is not None and want_number is not None:
            return float(got_number == want_number)
        assert self._math is not None
        return float(self._math.equivalent(got, want))


def _final_number(completion: str, expected: str) -> float:
    want = answers.expected_number(expected)
    if want is None:
        raise TermFailed(
            FailureCause.ERROR, f"the row's expected answer holds no number: {expected[:80]!r}"
        )
    got = answers.final_number(completion)
    return float(got is not None and got == want)


def _json_labels(completion: str, expected: str) -> TermOutcome:
    try:
        want = json.loads(expected)
    except ValueError:
        want = None
    if not isinstance(want, dict):
        raise TermFailed(
            FailureCause.ERROR, "the row's expected answer is not a JSON object of labels"
        )
    got = answers.json_object(completion)
    if got is None:
        return TermOutcome(0.0, "the completion holds no JSON object")
    if not want:
        return TermOutcome(1.0)
    matched = [k for k, v in want.items() if k in got and answers.same_json_value(v, got[k])]
    missed = [k for k in want if k not in matched]
    explanation = f"mismatched: {', '.join(missed)}" if missed else None
    return TermOutcome(len(matched) / len(want), explanation)


def _plain(answer: str) -> str:
    cleaned = _LATEX_NOISE_RE.sub("", answer)
    return cleaned.replace(r"\dfrac", r"\frac").replace(r"\tfrac", r"\frac").rstrip(".")
