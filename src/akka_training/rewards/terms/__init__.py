"""The registry of reward-term kinds: one grader class per ``kind`` of the plan.

`build_graders` turns ``config.reward.terms`` into graders, refusing (`RewardSetupError`) what
cannot run: duplicate names, a regex that does not compile, a rule that cannot be imported, a
judge's missing API-key variable. To add a kind: a plan model in `core.plans`, a grader module
here implementing `base.SyncGrader` or `base.AsyncGrader` (a remote one takes the scorer's
``clock`` in `_build`), and a line in `GRADERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.core.plans import (
    HttpTerm,
    JudgeTerm,
    LengthTerm,
    MatchTerm,
    RegexTerm,
    RuleTerm,
)
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.terms.base import AsyncGrader, Grader, SyncGrader
from akka_training.rewards.terms.http import HttpGrader
from akka_training.rewards.terms.judge import JudgeGrader
from akka_training.rewards.terms.length import LengthGrader
from akka_training.rewards.terms.match import MatchGrader
from akka_training.rewards.terms.regex import RegexGrader
from akka_training.rewards.terms.rule import BundleResolver, RuleGrader

__all__ = [
    "GRADERS",
    "AsyncGrader",
    "BundleResolver",
    "Grader",
    "SyncGrader",
    "TermSpec",
    "build_graders",
]

# Each kind's grader; a rule's also takes the bundle resolver.
GRADERS: dict[str, Callable[..., Grader]] = {
    "match": MatchGrader,
    "regex": RegexGrader,
    "length": LengthGrader,
    "rule": RuleGrader,
    "judge": JudgeGrader,
    "http": HttpGrader,
}

TermSpec = MatchTerm | RegexTerm | LengthTerm | RuleTerm | JudgeTerm | HttpTerm


def build_graders(
    terms: Sequence[TermSpec],
    *,
    bundle_resolver: BundleResolver | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> list[Grader]:
    """One grader per term, in the plan's order; the caller closes them. `clock`: the time the
    remote terms' budgets count."""
    names = [t.name for t in terms]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RewardSetupError(
            f"reward term names must be unique; {', '.join(map(repr, duplicates))} appear more "
            "than once in config.reward.terms"
        )
    graders: list[Grader] = []
    try:
        for term in terms:
            graders.append(_build(term, bundle_resolver, clock))
    except BaseException:
        for grader in graders:
            grader.close()
        raise
    return graders


def _build(term: TermSpec, bundle_resolver: BundleResolver | None, clock: Clock) -> Grader:
    if isinstance(term, RuleTerm):
        if bundle_resolver is None:
            raise RewardSetupError(
                f"reward term {term.name!r} is a rule, and this scorer was built without a "
                "bundle resolver"
            )
        return RuleGrader(term, bundle_resolver=bundle_resolver)
    if isinstance(term, JudgeTerm):
        return JudgeGrader(term, clock=clock)
    if isinstance(term, HttpTerm):
        return HttpGrader(term, clock=clock)
    return GRADERS[term.kind](term)
