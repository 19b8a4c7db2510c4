"""The rule term: a function from a packed, verified, unpacked scoring bundle."""

from __future__ import annotations

from pathlib import Path

import pytest

from akka_training.core.plans import RuleTerm
from akka_training.rewards.bundles import pack_bundle, unpack_bundle
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.scorer import RewardScorer

from ..servers import rollout

RULES = """
import json


def exact_json(prompt, completion, expected, row):
    return 1.0 if json.loads(completion) == json.loads(expected) else 0.0


def explained(prompt, completion, expected, row):
    return {"score": 0.5, "explanation": f"{row['topic']}: {prompt[-1]['content']}"}


def as_bool(prompt, completion, expected, row):
    return "yes" in completion


def broken(prompt, completion, expected, row):
    raise KeyError("label")


def not_a_number(prompt, completion, expected, row):
    return "high"
"""


@pytest.fixture
def resolver(tmp_path: Path):  # type: ignore[no-untyped-def]
    source = tmp_path / "src"
    (source / "rules").mkdir(parents=True)
    (source / "rules" / "__init__.py").write_text("")
    (source / "rules" / "grading.py").write_text(RULES)
    packed = pack_bundle(source, 1 << 20)
    directory = unpack_bundle(packed.data, packed.sha256, tmp_path / "bundles" / packed.sha256)
    seen: list[str] = []

    def resolve(ref: str) -> Path:
        seen.append(ref)
        return directory

    resolve.seen = seen  # type: ignore[attr-defined]
    return resolve


def rule(name: str) -> RuleTerm:
    return RuleTerm(
        name=name, kind="rule", bundle="maths/graders:v1", function=f"rules.grading:{name}"
    )


def test_a_rule_scores_with_the_bundle_function(resolver) -> None:  # type: ignore[no-untyped-def]
    with RewardScorer([rule("exact_json")], bundle_resolver=resolver) as scorer:
        batch = scorer.score([rollout('{"a": 1}', '{"a": 1}'), rollout('{"a": 2}', '{"a": 1}')])
    assert [r.values["exact_json"] for r in batch.rollouts] == [1.0, 0.0]
    assert resolver.seen == ["maths/graders:v1"]


def test_a_rule_receives_prompt_row_and_may_explain(resolver) -> None:  # type: ignore[no-untyped-def]
    chat = [{"role": "user", "content": "Is 7 prime?"}]
    with RewardScorer([rule("explained"), rule("as_bool")], bundle_resolver=resolver) as scorer:
        result = scorer.score([rollout("yes", "yes", prompt=chat, row={"topic": "primes"})])
    scored = result.rollouts[0]
    assert scored.values == {"explained": 0.5, "as_bool": 1.0}
    assert scored.explanations == {"explained": "primes: Is 7 prime?"}


def test_a_rule_that_raises_or_returns_no_number_fails_with_error(resolver) -> None:  # type: ignore[no-untyped-def]
    terms = [rule("broken"), rule("not_a_number")]
    with RewardScorer(terms, bundle_resolver=resolver) as scorer:
        batch = scorer.score([rollout(), rollout()])
    assert batch.rollouts[0].failures == {"broken": "error", "not_a_number": "error"}
    assert batch.rollouts[0].explanations["broken"] == "KeyError: 'label'"
    assert "not a number" in batch.rollouts[0].explanations["not_a_number"]
    assert batch.stats.failures == {("broken", "error"): 2, ("not_a_number", "error"): 2}
    assert batch.scores == [0.0, 0.0]


def test_a_rule_that_cannot_be_loaded_refuses_the_reward_up_front(resolver) -> None:  # type: ignore[no-untyped-def]
    term = RuleTerm(name="r", kind="rule", bundle="maths/graders:v1", function="rules.grading:nope")
    with pytest.raises(RewardSetupError, match=r"'r'.*'rules.grading:nope'.*no function 'nope'"):
        RewardScorer([term], bundle_resolver=resolver)


def test_a_rule_without_a_bundle_resolver_is_refused() -> None:
    with pytest.raises(RewardSetupError, match="without a bundle resolver"):
        RewardScorer([rule("as_bool")])
