"""Health figures of a reinforcement run, and the monitors that pause it.

`rollout_health` computes a step's figures from its rollouts alone (and the scorer's timings);
`HealthWatch` adds the ones that compare a step with the run's first steps, and decides, from
the plan's ``config.monitors``, when a monitor has stayed past its threshold long enough to
pause the run. Definitions (docs/health-monitors.md says the same):

- ``health/distinct_completions/group``: mean over prompt groups of (distinct completions in
  the group / the group's rollouts); ``…/step``: distinct completions / rollouts of the step.
- ``health/distinct_answers/group|step``: the same over final answers (`final_answer`: the last
  ``\\boxed{}``, else what follows the last ``####``, else the last non-empty line).
- ``health/term_failures/<term>``: share of the step's rollouts a judge or http term could not
  score; ``health/judge_failures``: the largest of them.
- ``health/term_latency_p95/<term>``: 95th percentile (nearest rank) of the seconds a judge or
  http term took per rollout; ``health/judge_latency_p95``: the largest of them.
- ``health/length_drift``: the step's ``completions/mean_length`` over the mean of the first
  ``baselineSteps`` steps' (from the step after them).
- ``health/reward_rise``: mean ``reward/mean`` of the latest ``baselineSteps`` steps minus that
  of the first ``baselineSteps``; ``health/term_rise``: the same over the correctness term's
  ``terms/<term>/share_mean``; ``health/hacking_gap``: reward_rise - term_rise (from the step
  after the baseline).

The first steps are the first steps this job trained: a resumed run starts a new baseline.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from akka_training.core.monitors import Verdict, pause_reason, verdicts
from akka_training.core.plans import Monitors, Reward
from akka_training.core.reports import MonitorPause
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.terms.answers import final_answer

REMOTE_KINDS = ("judge", "http")


def rollout_health(
    rollouts: Sequence[Rollout],
    remote_terms: Sequence[str] = (),
    seconds: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, float]:
    """A step's health figures from its rollouts (see the module docstring). `remote_terms`:
    the judge and http terms; `seconds`: per term, the seconds it took on each rollout."""
    if not rollouts:
        return {}
    completions = [r.completion for r in rollouts]
    answers = [final_answer(r.completion) for r in rollouts]
    groups: dict[int, list[int]] = defaultdict(list)
    for position, rollout in enumerate(rollouts):
        groups[rollout.group].append(position)
    figures = {
        "health/distinct_completions/group": _group_distinct(completions, groups),
        "health/distinct_completions/step": len(set(completions)) / len(completions),
        "health/distinct_answers/group": _group_distinct(answers, groups),
        "health/distinct_answers/step": len(set(answers)) / len(answers),
    }
    failures = []
    for term in remote_terms:
        share = sum(term in r.failures for r in rollouts) / len(rollouts)
        figures[f"health/term_failures/{term}"] = share
        failures.append(share)
    if failures:
        figures["health/judge_failures"] = max(failures)
    latencies = []
    for term in remote_terms:
        taken = list((seconds or {}).get(term) or [])
        if taken:
            p95 = percentile(taken, 0.95)
            figures[f"health/term_latency_p95/{term}"] = p95
            latencies.append(p95)
    if latencies:
        figures["health/judge_latency_p95"] = max(latencies)
    return figures


def remote_terms(reward: Reward | None) -> list[str]:
    """The reward's judge and http terms, by name."""
    return [t.name for t in (reward.terms if reward else []) if t.kind in REMOTE_KINDS]


def correctness_term(monitors: Monitors | None, reward: Reward | None) -> str | None:
    """The term reward hacking watches: the plan's choice, else its first match term."""
    if monitors is not None and monitors.correctness_term is not None:
        return monitors.correctness_term
    for term in reward.terms if reward else []:
        if term.kind == "match":
            return term.name
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `q` of the values at or
    below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])


@dataclass
class HealthWatch:
    """The run-long part of the monitors, fed one step's figures at a time by the job."""

    run: str
    monitors: Monitors = field(default_factory=Monitors)
    correctness: str | None = None
    lengths: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    term_shares: list[float] = field(default_factory=list)
    # Per monitor: how many steps in a row it has been past its threshold.
    streaks: dict[str, int] = field(default_factory=dict)
    tripped: MonitorPause | None = None

    def observe(
        self, step: int, figures: Mapping[str, float]
    ) -> tuple[dict[str, float], MonitorPause | None]:
        """The step's history figures, and the pause a monitor asks for at this step (only
        the first: once a monitor has paused the run, the job stops at this step)."""
        out = self._history(figures)
        seen = verdicts({**figures, **out}, self.monitors)
        past = {v.spec.name for v in seen if v.crossed}
        # A monitor whose figure is missing this step is not past its threshold either.
        self.streaks = {name: self.streaks.get(name, 0) + 1 for name in past}
        if self.tripped is not None:
            return out, None
        for verdict in seen:
            if self._trips(verdict):
                self.tripped = self._pause(verdict, step)
                return out, self.tripped
        return out, None

    def _trips(self, verdict: Verdict) -> bool:
        name = verdict.spec.name
        return (
            name in self.monitors.pause_on
            and self.streaks.get(name, 0) >= self.monitors.consecutive_steps
        )

    def _pause(self, verdict: Verdict, step: int) -> MonitorPause:
        steps = self.monitors.consecutive_steps
        return MonitorPause(
            monitor=verdict.spec.name,
            figure=verdict.spec.figure,
            value=verdict.value,
            threshold=verdict.threshold,
            step=step,
            reason=pause_reason(self.run, verdict, step, steps),
        )

    def _history(self, figures: Mapping[str, float]) -> dict[str, float]:
        base = self.monitors.baseline_steps
        out: dict[str, float] = {}
        length = figures.get("completions/mean_length")
        if length is not None:
            self.lengths.append(float(length))
            if len(self.lengths) > base:
                baseline = statistics.fmean(self.lengths[:base])
                if baseline > 0:
                    out["health/length_drift"] = float(length) / baseline
        reward = figures.get("reward/mean")
        if reward is None:
            return out
        self.rewards.append(float(reward))
        share = figures.get(f"terms/{self.correctness}/share_mean") if self.correctness else None
        if share is not None:
            self.term_shares.append(float(share))
        if len(self.rewards) > base:
            rise = _rise(self.rewards, base)
            out["health/reward_rise"] = rise
            if share is not None and len(self.term_shares) == len(self.rewards):
                term_rise = _rise(self.term_shares, base)
                out["health/term_rise"] = term_rise
                out["health/hacking_gap"] = rise - term_rise
        return out


def _rise(values: Sequence[float], window: int) -> float:
    return statistics.fmean(values[-window:]) - statistics.fmean(values[:window])


def _group_distinct(items: Sequence[str], groups: Mapping[int, Sequence[int]]) -> float:
    return statistics.fmean(len({items[i] for i in g}) / len(g) for g in groups.values())
