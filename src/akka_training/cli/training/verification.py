"""How `runs verify` prints a run's figures and rollouts against their recount for people."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training.cli.output import table

if TYPE_CHECKING:
    from akka_training.api.tasks import TaskRecord
    from akka_training.core.tasks import VerifyResult


def verification_of(task: TaskRecord) -> VerifyResult:
    """The result of a succeeded verify task."""
    from akka_training.core.tasks import VerifyResult

    return VerifyResult.model_validate(task.result or {})


def print_verification(result: VerifyResult) -> None:
    compared = sum(s.figures for s in result.steps)
    rollouts = sum(s.rollouts for s in result.steps)
    rescored = sum(s.rescored for s in result.steps)
    steps = len(result.steps)
    if not result.differences and not result.rollouts:
        print(
            f"Run {result.run}: all {compared} published figures of its {steps} steps match "
            f"their recount from the {rollouts} kept rollouts, and the run's reward gives the "
            f"{rescored} rollouts scored again what they kept."
        )
    if result.differences:
        print(
            f"Run {result.run}: {len(result.differences)} of its figures differ from their "
            f"recount from the {rollouts} kept rollouts ({steps} steps):"
        )
        table(
            ["STEP", "FIGURE", "PUBLISHED", "RECOUNTED"],
            [
                [d.step, d.figure, _value(d.published), _value(d.recomputed)]
                for d in result.differences
            ],
        )
    if result.rollouts:
        scored = {(r.step, r.index) for r in result.rollouts}
        print(
            f"Run {result.run}: {len(scored)} kept rollouts are not what the run's reward gives "
            "them when scored again:"
        )
        table(
            ["STEP", "ROLLOUT", "FIELD", "KEPT", "RESCORED"],
            [
                [r.step, r.index, r.field, _value(r.kept), _value(r.rescored)]
                for r in result.rollouts
            ],
        )
    for sentence in result.unchecked:
        print(f"Not checked: {sentence}")


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
