"""How `runs verify` prints a run's figures against their recomputation for people."""

from __future__ import annotations

from typing import TYPE_CHECKING

from akka_training.cli.output import table

if TYPE_CHECKING:
    from akka_training.api.verification import RunVerification


def print_verification(result: RunVerification) -> None:
    compared = sum(s.figures for s in result.steps)
    rollouts = sum(s.rollouts for s in result.steps)
    if not result.steps:
        print(f"Run {result.run} has kept no rollouts yet: there is nothing to verify.")
        return
    if not result.differences:
        print(
            f"Run {result.run}: all {compared} published figures of its {len(result.steps)} "
            f"steps match their recomputation from the {rollouts} kept rollouts."
        )
        return
    print(
        f"Run {result.run}: {len(result.differences)} of its figures differ from their "
        f"recomputation from the {rollouts} kept rollouts ({len(result.steps)} steps):"
    )
    table(
        ["STEP", "FIGURE", "PUBLISHED", "RECOMPUTED"],
        [[d.step, d.figure, _value(d.published), _value(d.recomputed)] for d in result.differences],
    )


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"
