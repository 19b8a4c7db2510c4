"""The health monitors of a reinforcement run: which figure each watches and where it trips.

The job computes the figures (`akka_training.rewards.health`), the service shows them in
`runs get` (its Health section) and the job pauses a run on the monitors a plan names in
``config.monitors.pauseOn``. Both read the definitions here, so the section and the pause agree.

One condition is not a threshold: ``non-finite-loss``, a loss or gradient norm that is NaN or
infinite (`non_finite_loss`). The run diverged; every later step would train on NaN weights.
The step pipeline fails the run at that step, naming the step and the figure, or pauses it
when ``config.monitors.pauseOn`` names ``non-finite-loss`` (a grpo or gspo run).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from akka_training.core.plans import Monitors, MonitorThresholds

Direction = Literal["below", "above", "away"]


@dataclass(frozen=True)
class MonitorSpec:
    name: str  # as config.monitors.pauseOn names it
    figure: str  # the step figure it watches
    # below: trips at or below the threshold; above: at or above; away: at or above the
    # threshold or at or below its inverse (a ratio that drifts either way).
    direction: Direction
    field: str  # the MonitorThresholds field that holds its threshold
    what: str  # what crossing it means, for the reason and the docs


SPECS: tuple[MonitorSpec, ...] = (
    MonitorSpec(
        "answer-collapse",
        "health/distinct_answers/step",
        "below",
        "answer_collapse",
        "the step's completions end in few distinct final answers",
    ),
    MonitorSpec(
        "zero-spread",
        "groups/frac_zero_std",
        "above",
        "zero_spread",
        "most prompt groups score all their completions the same (no learning signal)",
    ),
    MonitorSpec(
        "length-drift",
        "health/length_drift",
        "away",
        "length_drift",
        "the mean completion length moved far from its first steps'",
    ),
    MonitorSpec(
        "length-clipped",
        "completions/clipped_ratio",
        "above",
        "length_clipped",
        "completions run into maxCompletionTokens",
    ),
    MonitorSpec(
        "entropy-collapse",
        "entropy",
        "below",
        "entropy_collapse",
        "the policy's token entropy collapsed",
    ),
    MonitorSpec(
        "judge-failures",
        "health/judge_failures",
        "above",
        "judge_failures",
        "a judge or http term fails to score many rollouts",
    ),
    MonitorSpec(
        "judge-latency",
        "health/judge_latency_p95",
        "above",
        "judge_latency",
        "a judge or http term answers slowly (95th percentile, seconds)",
    ),
    MonitorSpec(
        "reward-hacking",
        "health/hacking_gap",
        "above",
        "reward_hacking",
        "the total reward rises while the correctness term does not",
    ),
)
BY_NAME: dict[str, MonitorSpec] = {s.name: s for s in SPECS}
# Every figure a monitor watches.
WATCHED: frozenset[str] = frozenset(s.figure for s in SPECS)


@dataclass(frozen=True)
class Verdict:
    spec: MonitorSpec
    value: float
    threshold: float
    crossed: bool


def threshold(spec: MonitorSpec, thresholds: MonitorThresholds) -> float:
    return float(getattr(thresholds, spec.field))


def crossed(spec: MonitorSpec, value: float, limit: float) -> bool:
    """Whether `value` is past `limit` in the monitor's direction (the limit itself counts)."""
    if spec.direction == "below":
        return value <= limit
    if spec.direction == "above":
        return value >= limit
    return value >= limit or value <= 1.0 / limit


def verdicts(figures: Mapping[str, float], monitors: Monitors | None) -> list[Verdict]:
    """Each monitor whose figure is among `figures`, with its threshold and whether it is past
    it, in `SPECS` order."""
    thresholds = (monitors or Monitors()).thresholds
    out = []
    for spec in SPECS:
        value = figures.get(spec.figure)
        if value is None:
            continue
        limit = threshold(spec, thresholds)
        out.append(Verdict(spec, float(value), limit, crossed(spec, float(value), limit)))
    return out


def describe(verdict: Verdict) -> str:
    """``0.125 (at or below 0.2)``: the figure against its threshold."""
    side = {
        "below": f"at or below {verdict.threshold:g}",
        "above": f"at or above {verdict.threshold:g}",
        "away": f"at or above {verdict.threshold:g} or at or below {1 / verdict.threshold:.3g}",
    }[verdict.spec.direction]
    return f"{verdict.value:.4g} ({side})"


def pause_reason(run: str, verdict: Verdict, step: int, steps: int) -> str:
    """What a run paused by a monitor says: the monitor, the figure, the step, what to do."""
    held = "" if steps == 1 else f" for {steps} steps in a row"
    return (
        f"The {verdict.spec.name} monitor paused the run at step {step}: "
        f"{verdict.spec.figure} was {describe(verdict)}{held} ({verdict.spec.what}). "
        f"Inspect the rollouts with `akka training runs rollouts {run} --step {step}`, then "
        f"`akka training runs resume {run}`, or branch from the snapshot with other settings."
    )


NON_FINITE_LOSS = "non-finite-loss"
# The figures whose NaN or infinity means the run diverged, as the engines name them: the
# training loss (TRL), the policy loss (verl) and the gradient's norm (both).
LOSS_FIGURES: tuple[str, ...] = ("loss", "policy_loss", "grad_norm")


def non_finite_loss(figures: Mapping[str, float]) -> tuple[str, float] | None:
    """The first of `LOSS_FIGURES` that is NaN or infinite in a step's figures, and its value;
    None when every one there is finite."""
    for name in LOSS_FIGURES:
        value = figures.get(name)
        if value is not None and not math.isfinite(value):
            return name, float(value)
    return None


def shown_number(value: float) -> str:
    """``NaN``, ``Infinity``, ``-Infinity``, or the number (as a run's figures show them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.4g}"


def diverged_reason(step: int, figure: str, value: float) -> str:
    """Why a run that diverged failed: the step, the figure, what to change."""
    return (
        f"step {step}: {figure} is {shown_number(value)} (the run diverged; lower the learning "
        "rate, or start again from a snapshot taken before this step; "
        f"config.monitors.pauseOn: [{NON_FINITE_LOSS}] pauses a grpo or gspo run instead)"
    )


def diverged_pause_reason(run: str, step: int, figure: str, value: float) -> str:
    """What a run paused by ``non-finite-loss`` says."""
    return (
        f"The {NON_FINITE_LOSS} monitor paused the run at step {step}: {figure} was "
        f"{shown_number(value)} (the run diverged). The snapshot of step {step} holds the "
        "diverged weights: list the earlier ones with `akka training runs snapshots "
        f"{run}` and branch from one with a lower learning rate (`akka training "
        f"runs branch {run} --snapshot NAME --overrides changes.yaml`)."
    )
