"""The ``rule`` term: a Python function from a registered scoring bundle.

The function named ``module:func`` is imported from the bundle when the scorer is built (an
import error refuses the reward then) and called for each rollout as
``func(prompt=..., completion=..., expected=..., row=...)``. It returns a number (a bool counts
as 1 or 0), or a dict with ``score`` and optionally ``explanation``. The value is used as returned; keep it in
[0, 1] so a full score means every term at its best. An exception, or a return that is not a
finite number, fails the term with cause ``error``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from akka_training.core.plans import RuleTerm
from akka_training.rewards.bundles import load_function
from akka_training.rewards.inputs import (
    FailureCause,
    RewardSetupError,
    RolloutInput,
    TermFailed,
    TermOutcome,
)
from akka_training.rewards.terms.base import SyncGrader

# Turns the plan's bundle reference (``PROJECT/NAME:vN``) into the directory of the verified,
# unpacked bundle (see `bundles.unpack_bundle`).
BundleResolver = Callable[[str], Path]


class RuleGrader(SyncGrader):
    kind = "rule"

    def __init__(self, spec: RuleTerm, *, bundle_resolver: BundleResolver) -> None:
        super().__init__(spec.name, spec.weight)
        try:
            directory = bundle_resolver(spec.bundle)
            self.function = load_function(directory, spec.function)
        except Exception as exc:  # importing user code can raise anything
            raise RewardSetupError(
                f"reward term {spec.name!r}: the function {spec.function!r} of bundle "
                f"{spec.bundle!r} could not be loaded: {exc}"
            ) from exc

    def evaluate(self, rollout: RolloutInput) -> TermOutcome:
        try:
            result = self.function(
                prompt=rollout.prompt,
                completion=rollout.completion,
                expected=rollout.expected,
                row=dict(rollout.row),
            )
        except Exception as exc:  # the user's code: any exception is this term's failure
            raise TermFailed(FailureCause.ERROR, f"{type(exc).__name__}: {exc}") from exc
        return _outcome(result)


def _outcome(result: Any) -> TermOutcome:
    explanation = None
    if isinstance(result, dict):
        explanation = result.get("explanation")
        result = result.get("score")
    if not isinstance(result, int | float):  # bool is an int: True scores 1
        raise TermFailed(
            FailureCause.ERROR,
            f"the rule returned {type(result).__name__}, not a number or a dict with 'score'",
        )
    value = float(result)
    if not math.isfinite(value):
        raise TermFailed(FailureCause.ERROR, f"the rule returned {value}")
    return TermOutcome(value, None if explanation is None else str(explanation))
