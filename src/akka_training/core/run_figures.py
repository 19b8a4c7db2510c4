"""What the service keeps of a run's figures on its row (`runs.summary`): the latest loss and
reward, the run's throughput, MFU and padding share with the sums they come from, the latest
health figures, the latest preference figures (dpo), the last pause a monitor caused, and the
closing figures the job reported.

Step reports change it through `with_step` and `with_pause`, the job's end through `with_end`;
`runs get` reads its fields. It is stored as JSON with camelCase keys, the keys rows have always
held; keys another version wrote are kept as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from akka_training.core.figures import Figures
from akka_training.core.reports import JobSummary, MonitorPause

__all__ = ["HealthFigures", "PreferenceFigures", "RunFigures", "StepTotals"]


class _Stored(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        defer_build=True,
    )

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StepTotals(_Stored):
    """The run's sums over the steps it kept (a step trained again counts once):

    - `tokens` and `seconds` (``timing/step``): throughput is tokens / training time.
    - `flop_seconds` (each step's MFU x the time it was measured over, ``timing/update`` or
      ``timing/step``) and `mfu_seconds` (that time): MFU is FLOPs / (time x peak), which is
      flop_seconds / mfu_seconds for one device peak.
    - `real_tokens` and `slots` (real tokens / (1 - padding share)): the padding share is
      1 - real_tokens / slots.
    """

    tokens: float = 0.0
    seconds: float = 0.0
    flop_seconds: float = 0.0
    mfu_seconds: float = 0.0
    real_tokens: float = 0.0
    slots: float = 0.0

    def with_step(self, figures: Figures, sign: int) -> StepTotals:
        """The sums with one step's figures added (`sign` 1) or taken away (-1)."""
        sums = self.model_dump(by_alias=False)
        tokens, seconds = figures.tokens, figures.step_seconds
        if tokens is not None and seconds is not None:
            sums["tokens"] += sign * tokens
            sums["seconds"] += sign * seconds
        measured = figures.update_seconds if figures.update_seconds is not None else seconds
        if figures.mfu is not None and measured is not None:
            sums["flop_seconds"] += sign * figures.mfu * measured
            sums["mfu_seconds"] += sign * measured
        share = figures.padding_share
        if share is not None and tokens is not None and share < 1:
            sums["real_tokens"] += sign * tokens
            sums["slots"] += sign * tokens / (1.0 - share)
        return StepTotals(**sums)

    def tokens_per_second(self) -> float | None:
        return _ratio(self.tokens, self.seconds)

    def mfu(self) -> float | None:
        return _ratio(self.flop_seconds, self.mfu_seconds)

    def padding_share(self) -> float | None:
        real = _ratio(self.real_tokens, self.slots)
        return None if real is None else max(0.0, 1.0 - real)


class HealthFigures(_Stored):
    """The health monitors' figures of the latest step that reported any."""

    step: int
    figures: dict[str, float]


class PreferenceFigures(_Stored):
    """A dpo run's preference figures (``rewards/chosen``, ``logps/rejected``, …) of its latest
    step, and of its first (where the rewards are 0: the policy is the reference)."""

    step: int
    figures: dict[str, float]


class RunFigures(_Stored):
    loss: float | None = None  # the latest step's training loss (sft), then the job's final
    reward: float | None = None  # the latest step's mean reward, then the job's final
    first_reward: float | None = None
    eval_loss: float | None = None
    tokens_per_second: float | None = None
    mfu: float | None = None
    padding_share: float | None = None
    totals: StepTotals = StepTotals()
    health: HealthFigures | None = None
    preference: PreferenceFigures | None = None
    monitor_pause: MonitorPause | None = None
    # The job's closing counts of tool calls, by tool (reinforcement runs with tools).
    tool_calls: dict[str, int] | None = None
    tool_failures: dict[str, int] | None = None
    tool_timeouts: dict[str, int] | None = None

    def with_step(
        self, step: int, figures: Figures, method: str, replaced: Figures | None = None
    ) -> RunFigures:
        """The run's figures once `step` reported `figures`; `replaced`: what an earlier attempt
        had reported for the same step, which stops counting."""
        totals = self.totals if replaced is None else self.totals.with_step(replaced, -1)
        totals = totals.with_step(figures, 1)
        changes: dict[str, Any] = {
            "totals": totals,
            "tokens_per_second": totals.tokens_per_second(),
            "mfu": totals.mfu(),
            "padding_share": totals.padding_share(),
        }
        if figures.loss is not None and method in ("sft", "dpo"):
            changes["loss"] = figures.loss
        if figures.reward_mean is not None:
            changes["reward"] = figures.reward_mean
            if self.first_reward is None:
                changes["first_reward"] = figures.reward_mean
        if figures.eval_loss is not None:
            changes["eval_loss"] = figures.eval_loss
        health = figures.health()
        if health:
            changes["health"] = HealthFigures(step=step, figures=health)
        preference = figures.preference()
        if preference:
            changes["preference"] = PreferenceFigures(step=step, figures=preference)
        return self.model_copy(update=changes)

    def without_steps(self, dropped: Iterable[Figures]) -> RunFigures:
        """The run's figures once the steps that reported `dropped` are deleted (a new attempt
        resumes from an earlier snapshot and reports them again): they stop counting."""
        totals = self.totals
        for figures in dropped:
            totals = totals.with_step(figures, -1)
        return self.model_copy(
            update={
                "totals": totals,
                "tokens_per_second": totals.tokens_per_second(),
                "mfu": totals.mfu(),
                "padding_share": totals.padding_share(),
            }
        )

    def with_pause(self, pause: MonitorPause) -> RunFigures:
        return self.model_copy(update={"monitor_pause": pause})

    def with_end(self, summary: JobSummary) -> RunFigures:
        """The closing figures the job reported with its end, over the steps' own."""
        return self.model_copy(update=summary.model_dump(exclude_none=True))


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 1e-12 else None
