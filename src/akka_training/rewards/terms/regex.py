"""The ``regex`` term: 1 when ``re.search(pattern, completion, re.MULTILINE)`` finds a match.

The pattern is compiled once, when the scorer is built; one that does not compile is refused
then (`RewardSetupError`) rather than failing every rollout.
"""

from __future__ import annotations

import re

from akka_training.core.plans import RegexTerm
from akka_training.rewards.inputs import RewardSetupError, RolloutInput, TermOutcome
from akka_training.rewards.terms.base import SyncGrader


class RegexGrader(SyncGrader):
    kind = "regex"
    batched = True

    def __init__(self, spec: RegexTerm) -> None:
        super().__init__(spec.name, spec.weight)
        try:
            self.pattern = re.compile(spec.pattern, re.MULTILINE)
        except re.error as exc:
            raise RewardSetupError(
                f"reward term {spec.name!r}: the pattern {spec.pattern!r} is not a valid "
                f"Python regular expression ({exc}); fix config.reward.terms[].pattern"
            ) from exc

    def evaluate(self, rollout: RolloutInput) -> TermOutcome:
        return TermOutcome(1.0 if self.pattern.search(rollout.completion) else 0.0)
