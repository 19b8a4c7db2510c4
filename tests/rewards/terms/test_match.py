"""The match term's modes, positive and negative, as a scorer reports them."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from akka_training.core.plans import MatchTerm
from akka_training.rewards.inputs import TermFailed
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.terms.match import MatchGrader
from akka_training.rewards.terms.maths import MathChecker

from ..servers import rollout

_scorers: dict[str, RewardScorer] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_scorers() -> Iterator[None]:
    yield
    for scorer in _scorers.values():
        scorer.close()  # stops the math workers
    _scorers.clear()


def score(mode: str, completion: str, expected: str | None) -> tuple[float, dict[str, str]]:
    """The term's value and failures for one rollout (one scorer per mode, so the math
    workers start once for the file)."""
    if mode not in _scorers:
        _scorers[mode] = RewardScorer([MatchTerm(name="m", kind="match", mode=mode)])  # type: ignore[arg-type]
    result = _scorers[mode].score([rollout(completion, expected)]).rollouts[0]
    return result.values["m"], result.failures


@pytest.mark.parametrize(
    ("completion", "expected", "value"),
    [
        ("  Paris\n", "Paris", 1.0),
        ("Paris.", "Paris", 0.0),
        ("paris", "Paris", 0.0),
    ],
)
def test_exact_ignores_only_surrounding_whitespace(
    completion: str, expected: str, value: float
) -> None:
    assert score("exact", completion, expected) == (value, {})


def test_contains() -> None:
    assert score("contains", "The capital is Paris, of course.", " Paris ") == (1.0, {})
    assert score("contains", "The capital is Lyon.", "Paris") == (0.0, {})


@pytest.mark.parametrize(
    ("completion", "expected", "value"),
    [
        ("6 x 7 = 42\n#### 42", "#### 42", 1.0),
        ("#### 41\nno wait\n#### 1,200", "Natalia sold...\n#### 1200", 1.0),
        ("#### $1,200.00", "1200", 1.0),
        ("#### -3.5", "-3.50", 1.0),
        ("#### 42", "#### 43", 0.0),
        ("the answer is 42", "#### 42", 0.0),  # no #### in the completion
        ("#### 42\n#### 41", "42", 0.0),  # the last #### counts
    ],
)
def test_final_number(completion: str, expected: str, value: float) -> None:
    assert score("final-number", completion, expected) == (value, {})


def test_final_number_without_a_number_in_the_expected_answer_is_an_error() -> None:
    value, failures = score("final-number", "#### 42", "forty-two")
    assert (value, failures) == (0.0, {"m": "error"})


@pytest.mark.parametrize(
    ("completion", "value"),
    [
        ('{"sentiment": "positive", "topic": "sport"}', 1.0),
        ('Here you go:\n```json\n{"sentiment": "Positive ", "topic": "music"}\n```', 0.5),
        ('{"sentiment": "negative", "topic": "music", "extra": 1}', 0.0),
        ("not json at all", 0.0),
        ('{"sentiment": "positive"}', 0.5),  # a missing field does not match
    ],
)
def test_json_label_match_scores_the_share_of_matching_fields(
    completion: str, value: float
) -> None:
    assert score("json-label-match", completion, '{"sentiment": "positive", "topic": "sport"}')[
        0
    ] == pytest.approx(value)


def test_json_label_match_compares_numbers_by_value_and_not_bools() -> None:
    expected = '{"count": 3, "flag": true}'
    assert score("json-label-match", '{"count": 3.0, "flag": true}', expected)[0] == 1.0
    assert score("json-label-match", '{"count": 3, "flag": 1}', expected)[0] == 0.5


def test_json_label_match_with_an_expected_answer_that_is_no_object_is_an_error() -> None:
    assert score("json-label-match", "{}", "positive") == (0.0, {"m": "error"})


def test_a_row_without_expected_answer_is_an_error_for_every_mode() -> None:
    for mode in ("exact", "contains", "final-number", "json-label-match", "math"):
        assert score(mode, "42", None) == (0.0, {"m": "error"})


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"So the answer is $\boxed{\frac{1}{2}}$.", "0.5"),
        (r"\boxed{2\sqrt{2}}", r"\sqrt{8}"),
        (r"\boxed{(x+1)^2}", "x^2 + 2x + 1"),
        ("work...\n#### 1,000", r"\boxed{1000}"),
        (r"\boxed{\dfrac{\pi}{2}}", r"\frac{\pi}{2}"),
        ("The answer is 3/4", "0.75"),
        (r"\boxed{x = 5}", "5"),
        (r"\boxed{(2, 1)}", r"\boxed{(2,1)}"),
    ],
)
def test_math_accepts_equivalent_answers(completion: str, expected: str) -> None:
    assert score("math", completion, expected) == (1.0, {})


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (r"\boxed{\frac{1}{3}}", "0.5"),
        (r"\boxed{x^2 + 1}", "(x+1)^2"),
        ("I am not sure.", "4"),
        (r"\boxed{(1, 2)}", "(1, 2, 3)"),
    ],
)
def test_math_refuses_different_answers(completion: str, expected: str) -> None:
    assert score("math", completion, expected) == (0.0, {})


@pytest.mark.parametrize(
    ("completion", "expected", "value"),
    [
        # A parenthesised pair is ordered (a point or an open interval); a bare list is a set.
        (r"\boxed{(1, 2)}", "(2, 1)", 0.0),
        (r"\boxed{1, 2}", "2, 1", 1.0),
        (r"\boxed{\{1, 2\}}", r"\{2, 1\}", 1.0),
        (r"\boxed{[1, 2)}", r"[1, \frac{4}{2})", 1.0),
        (r"\boxed{[1, 2)}", "(1, 2]", 0.0),
        (
            r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}",
            r"\begin{pmatrix}1\\\frac{4}{2}\end{pmatrix}",
            1.0,
        ),
        (r"\boxed{\begin{pmatrix}1\\2\end{pmatrix}}", r"\begin{pmatrix}2\\1\end{pmatrix}", 0.0),
        (r"\boxed{\ln e}", "1", 1.0),
        # An equation counts by its value, on either side.
        (r"\boxed{5}", "x = 5", 1.0),
        (r"\boxed{x=1, y=2}", "(1, 2)", 1.0),
        # Numbers agree to six decimal places.
        (r"\boxed{0.3333333}", r"\frac{1}{3}", 1.0),
        (r"\boxed{0.33}", r"\frac{1}{3}", 0.0),
        # The ANTLR 4.9.3 grammar drops a percent sign (see math_worker.py).
        (r"\boxed{50\%}", "50", 1.0),
        (r"\boxed{50\%}", "0.5", 0.0),
        (r"\boxed{\text{5 apples}}", "5", 0.0),
        (r"\boxed{y}", "x", 0.0),
    ],
)
def test_math_reads_lists_sets_intervals_and_matrices(
    completion: str, expected: str, value: float
) -> None:
    assert score("math", completion, expected) == (value, {})


def test_math_never_evaluates_code_from_a_completion(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    completion = rf"\boxed{{__import__('os').system('touch {marker}')}}"
    assert score("math", completion, "0") == (0.0, {})
    assert not marker.exists()


def test_math_comparison_that_runs_away_is_stopped_and_counted_as_a_timeout() -> None:
    checker = MathChecker(processes=1, timeout_seconds=1.0)
    grader = MatchGrader(MatchTerm(name="m", kind="match", mode="math"), math_checker=checker)
    try:
        with pytest.raises(TermFailed) as failed:
            grader.evaluate(rollout(r"\boxed{9^{9^{9^{9}}}}", "1"))
        assert failed.value.cause == "timeout"
        # The killed worker is replaced: the next comparison works.
        assert grader.evaluate(rollout(r"\boxed{\sqrt{4}}", "2")).value == 1.0
    finally:
        checker.close()


def test_math_without_math_verify_in_the_job_environment_fails_with_its_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The interpreter this virtualenv was made from has the standard library only.
    monkeypatch.setattr(sys, "executable", sys._base_executable)  # type: ignore[attr-defined]  # CPython's, not in typeshed
    checker = MathChecker(processes=1, start_timeout_seconds=30.0)
    grader = MatchGrader(MatchTerm(name="m", kind="match", mode="math"), math_checker=checker)
    try:
        with pytest.raises(TermFailed) as failed:
            grader.evaluate(rollout(r"\boxed{\sqrt{4}}", "2"))
        assert failed.value.cause == "error"
        assert failed.value.detail == (
            "the symbolic-comparison worker did not start (is math-verify installed in the "
            "job's environment?)"
        )
    finally:
        checker.close()
