"""The ``length`` term: a bonus on a completion inside a length range, or, with a negative
weight, a penalty on a completion outside it.

With a positive weight the value is 1 when the completion's token count ``n`` lies in
``[minTokens, maxTokens]`` (no upper bound when ``maxTokens`` is unset) and falls linearly to 0
over ``slackTokens`` outside it: ``max(0, 1 - (minTokens - n) / slackTokens)`` below,
``max(0, 1 - (n - maxTokens) / slackTokens)`` above. With a negative weight the value is the
distance from the range instead, ``1 -`` that: 0 inside the range, rising to 1 over
``slackTokens`` outside it, so that weight x value is 0 for a completion of the right length
and reaches the weight for one that is far too short or too long.
"""

from __future__ import annotations

from akka_training.core.plans import LengthTerm
from akka_training.rewards.inputs import RolloutInput, TermOutcome
from akka_training.rewards.terms.base import SyncGrader


class LengthGrader(SyncGrader):
    kind = "length"
    batched = True

    def __init__(self, spec: LengthTerm) -> None:
        super().__init__(spec.name, spec.weight)
        self.min_tokens = spec.min_tokens
        self.max_tokens = spec.max_tokens
        self.slack_tokens = spec.slack_tokens

    def evaluate(self, rollout: RolloutInput) -> TermOutcome:
        inside = length_value(
            rollout.completion_tokens, self.min_tokens, self.max_tokens, self.slack_tokens
        )
        # A penalty (negative weight) is paid for being outside the range, not inside it.
        return TermOutcome(1.0 - inside if self.weight < 0 else inside)


def length_value(tokens: int, min_tokens: int, max_tokens: int | None, slack_tokens: int) -> float:
    """The ``length`` term's value for a completion of `tokens` tokens."""
    if tokens < min_tokens:
        return max(0.0, 1.0 - (min_tokens - tokens) / slack_tokens)
    if max_tokens is not None and tokens > max_tokens:
        return max(0.0, 1.0 - (tokens - max_tokens) / slack_tokens)
    return 1.0
