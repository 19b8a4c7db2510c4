"""How the flat figure names an engine reports map onto catalog metrics.

An engine reports each step as ``{name: value}`` (the same dict it sends to the service in a
`StepReport`). `JobTelemetry.step` writes every figure to ``metrics.jsonl`` and TensorBoard, and
publishes the ones this table routes. A figure the table does not know is kept in the files
only. ``<term>`` stands for a reward term's name; ``<part>`` for one of the memory parts.

Every step, whatever its figures, adds 1 to the kind's step counter
(``akka.optimize.training.{sft,rl}.step.count``) and sets ``akka.optimize.training.step.latest``.

| figure (both kinds)            | metric                                       | attributes            |
|--------------------------------|----------------------------------------------|-----------------------|
| tokens                         | step.tokens                                  |                       |
| tokens_per_second              | step.throughput                              |                       |
| mfu                            | step.mfu.ratio                               |                       |
| memory/<part>                  | memory.peak                                  | memory.part=<part>    |
| memory/peak                    | memory.allocated.peak                        |                       |
| memory/reserved                | memory.reserved                              |                       |
| memory/host_peak               | memory.host.peak                             |                       |
| padding_share                  | data.padding.ratio                           |                       |

| figure (sft, dpo)              | metric                                       | attributes            |
|--------------------------------|----------------------------------------------|-----------------------|
| loss                           | sft.loss                                     |                       |
| eval_loss                      | sft.eval.loss                                |                       |
| learning_rate                  | sft.learning_rate                            |                       |
| grad_norm                      | sft.grad_norm                                |                       |
| rewards/chosen                 | dpo.rewards.chosen                           |                       |
| rewards/rejected               | dpo.rewards.rejected                         |                       |
| rewards/margins                | dpo.rewards.margin                           |                       |
| rewards/accuracies             | dpo.rewards.accuracy.ratio                   |                       |
| logps/chosen                   | dpo.logps.chosen                             |                       |
| logps/rejected                 | dpo.logps.rejected                           |                       |
| timing/step                    | sft.step.timing                              | step.phase=step       |
| timing/evaluation              | sft.step.timing                              | step.phase=evaluation |
| timing/save                    | sft.step.timing                              | step.phase=save       |

| figure (rl)                    | metric                                       | attributes            |
|--------------------------------|----------------------------------------------|-----------------------|
| timing/generation              | rl.step.timing                               | step.phase=generation |
| timing/reward                  | rl.step.timing                               | step.phase=reward     |
| timing/update                  | rl.step.timing                               | step.phase=update     |
| reward/mean                    | rl.reward.mean                               |                       |
| reward/std                     | rl.reward.std                                |                       |
| reward/min                     | rl.reward.min                                |                       |
| reward/max                     | rl.reward.max                                |                       |
| groups/frac_zero_std           | rl.reward.zero_std.ratio                     |                       |
| rollouts/frac_zero             | rl.reward.zero.ratio                         |                       |
| rollouts/frac_full             | rl.reward.full.ratio                         |                       |
| terms/<term>/share_mean        | rl.term.share.mean                           | reward.term=<term>    |
| terms/<term>/share_std         | rl.term.share.std                            | reward.term=<term>    |
| completions/min_length         | rl.completion.length.min                     |                       |
| completions/max_length         | rl.completion.length.max                     |                       |
| completions/mean_length        | rl.completion.length.mean                    |                       |
| completions/mean_terminated_length | rl.completion.terminated.length.mean     |                       |
| completions/clipped_ratio      | rl.completion.truncated.ratio                |                       |
| clip_ratio/low_mean            | rl.policy.clipped.ratio                      | policy.clip.bound=low |
| clip_ratio/high_mean           | rl.policy.clipped.ratio                      | policy.clip.bound=high|
| tools/calls_per_completion     | rl.tool.calls                                |                       |
| tools/failure_share            | rl.tool.failure.ratio                        |                       |
| kl                             | rl.kl                                        |                       |
| entropy                        | rl.entropy                                   |                       |
| policy_loss                    | rl.policy.loss                               |                       |
| health/distinct_completions/group | rl.health.completions.distinct.group.ratio |                    |
| health/distinct_completions/step | rl.health.completions.distinct.step.ratio  |                       |
| health/distinct_answers/group  | rl.health.answers.distinct.group.ratio       |                       |
| health/distinct_answers/step   | rl.health.answers.distinct.step.ratio        |                       |
| health/length_drift            | rl.health.length.drift.ratio                 |                       |
| health/term_failures/<term>    | rl.health.term.failure.ratio                 | reward.term=<term>    |
| health/term_latency_p95/<term> | rl.health.term.latency.p95                   | reward.term=<term>    |
| health/judge_failures          | rl.health.judge.failure.ratio                |                       |
| health/judge_latency_p95       | rl.health.judge.latency.p95                  |                       |
| health/reward_rise             | rl.health.reward.rise                        |                       |
| health/term_rise               | rl.health.term.rise                          |                       |
| health/hacking_gap             | rl.health.hacking.gap                        |                       |
| learning_rate                  | rl.learning_rate                             |                       |
| grad_norm                      | rl.grad_norm                                 |                       |

Histograms (`JobTelemetry.histograms`, one value per rollout):

| name                           | metric                                       | attributes            |
|--------------------------------|----------------------------------------------|-----------------------|
| reward                         | rl.rollout.reward                            |                       |
| reward/<term>                  | rl.rollout.term.share                        | reward.term=<term>    |
| completion_length              | rl.rollout.completion.length                 |                       |

Metric and attribute names above omit the ``akka.optimize.training.`` prefix. The generated
reference renders the same table from `mapping_rows()`, so the two cannot disagree for long: a
test compares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from akka_training.telemetry import catalog as c

Kind = Literal["sft", "rl"]
KINDS: tuple[Kind, ...] = ("sft", "rl")


@dataclass(frozen=True)
class Route:
    """Where one figure goes: a catalog metric and the data point attributes it carries."""

    metric: str
    attributes: Mapping[str, str] = field(default_factory=dict)


def route(kind: Kind, figure: str) -> Route | None:
    """The metric a step figure is published as, or None (kept in the files only)."""
    fixed = _FIXED[kind].get(figure)
    if fixed is not None:
        return fixed
    for prefix, suffix, metric, attribute in _PATTERNS[kind]:
        name = _between(figure, prefix, suffix)
        if name:
            return Route(metric, {attribute: name})
    return None


def histogram_route(name: str) -> Route | None:
    """The histogram a per-rollout value list is recorded in, or None."""
    fixed = _HISTOGRAMS.get(name)
    if fixed is not None:
        return fixed
    term = _between(name, "reward/", "")
    return Route(c.PREFIX + "rl.rollout.term.share", {c.REWARD_TERM: term}) if term else None


def mapping_rows() -> list[tuple[str, str, str, str]]:
    """(kind, figure, metric, attributes) for every route, patterns written with ``<name>``;
    kind is ``sft``, ``rl``, ``both`` or ``histogram``."""
    rows: list[tuple[str, str, str, str]] = []
    common = dict(_COMMON)
    for figure, r in common.items():
        rows.append(("both", figure, r.metric, _attrs(r)))
    rows.append(("both", "memory/<part>", c.PREFIX + "memory.peak", f"{c.MEMORY_PART}=<part>"))
    for kind in KINDS:
        for figure, r in _FIXED[kind].items():
            if figure in common or figure in _MEMORY:
                continue
            rows.append((kind, figure, r.metric, _attrs(r)))
        for prefix, suffix, metric, attribute in _PATTERNS[kind]:
            rows.append((kind, f"{prefix}<term>{suffix}", metric, f"{attribute}=<term>"))
    for name, r in _HISTOGRAMS.items():
        rows.append(("histogram", name, r.metric, _attrs(r)))
    rows.append(
        (
            "histogram",
            "reward/<term>",
            c.PREFIX + "rl.rollout.term.share",
            f"{c.REWARD_TERM}=<term>",
        )
    )
    return rows


# --- the tables -----------------------------------------------------------------------------------


def _r(short: str, **attributes: str) -> Route:
    return Route(
        c.PREFIX + short, {c.PREFIX + k.replace("_", "."): v for k, v in attributes.items()}
    )


_COMMON: dict[str, Route] = {
    "tokens": _r("step.tokens"),
    "tokens_per_second": _r("step.throughput"),
    "mfu": _r("step.mfu.ratio"),
    "memory/peak": _r("memory.allocated.peak"),
    "memory/reserved": _r("memory.reserved"),
    "memory/host_peak": _r("memory.host.peak"),
    "padding_share": _r("data.padding.ratio"),
}
_MEMORY: dict[str, Route] = {
    f"memory/{part}": Route(c.PREFIX + "memory.peak", {c.MEMORY_PART: part})
    for part in c.MEMORY_PARTS
}
_SFT: dict[str, Route] = {
    "loss": _r("sft.loss"),
    "eval_loss": _r("sft.eval.loss"),
    "learning_rate": _r("sft.learning_rate"),
    "grad_norm": _r("sft.grad_norm"),
    # A dpo step is a supervised step with its preference figures.
    "rewards/chosen": _r("dpo.rewards.chosen"),
    "rewards/rejected": _r("dpo.rewards.rejected"),
    "rewards/margins": _r("dpo.rewards.margin"),
    "rewards/accuracies": _r("dpo.rewards.accuracy.ratio"),
    "logps/chosen": _r("dpo.logps.chosen"),
    "logps/rejected": _r("dpo.logps.rejected"),
    **{f"timing/{p}": _r("sft.step.timing", step_phase=p) for p in c.SFT_PHASES},
}
_RL: dict[str, Route] = {
    **{f"timing/{p}": _r("rl.step.timing", step_phase=p) for p in c.RL_PHASES},
    "reward/mean": _r("rl.reward.mean"),
    "reward/std": _r("rl.reward.std"),
    "reward/min": _r("rl.reward.min"),
    "reward/max": _r("rl.reward.max"),
    "groups/frac_zero_std": _r("rl.reward.zero_std.ratio"),
    "rollouts/frac_zero": _r("rl.reward.zero.ratio"),
    "rollouts/frac_full": _r("rl.reward.full.ratio"),
    "completions/min_length": _r("rl.completion.length.min"),
    "completions/max_length": _r("rl.completion.length.max"),
    "completions/mean_length": _r("rl.completion.length.mean"),
    "completions/mean_terminated_length": _r("rl.completion.terminated.length.mean"),
    "completions/clipped_ratio": _r("rl.completion.truncated.ratio"),
    "clip_ratio/low_mean": _r("rl.policy.clipped.ratio", policy_clip_bound="low"),
    "clip_ratio/high_mean": _r("rl.policy.clipped.ratio", policy_clip_bound="high"),
    "tools/calls_per_completion": _r("rl.tool.calls"),
    "tools/failure_share": _r("rl.tool.failure.ratio"),
    "kl": _r("rl.kl"),
    "entropy": _r("rl.entropy"),
    "policy_loss": _r("rl.policy.loss"),
    "learning_rate": _r("rl.learning_rate"),
    "grad_norm": _r("rl.grad_norm"),
    "health/distinct_completions/group": _r("rl.health.completions.distinct.group.ratio"),
    "health/distinct_completions/step": _r("rl.health.completions.distinct.step.ratio"),
    "health/distinct_answers/group": _r("rl.health.answers.distinct.group.ratio"),
    "health/distinct_answers/step": _r("rl.health.answers.distinct.step.ratio"),
    "health/length_drift": _r("rl.health.length.drift.ratio"),
    "health/judge_failures": _r("rl.health.judge.failure.ratio"),
    "health/judge_latency_p95": _r("rl.health.judge.latency.p95"),
    "health/reward_rise": _r("rl.health.reward.rise"),
    "health/term_rise": _r("rl.health.term.rise"),
    "health/hacking_gap": _r("rl.health.hacking.gap"),
}
_FIXED: dict[str, dict[str, Route]] = {
    "sft": {**_COMMON, **_MEMORY, **_SFT},
    "rl": {**_COMMON, **_MEMORY, **_RL},
}
# (prefix, suffix, metric, attribute that takes the part in between)
_PATTERNS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "sft": (),
    "rl": (
        ("terms/", "/share_mean", c.PREFIX + "rl.term.share.mean", c.REWARD_TERM),
        ("terms/", "/share_std", c.PREFIX + "rl.term.share.std", c.REWARD_TERM),
        ("health/term_failures/", "", c.PREFIX + "rl.health.term.failure.ratio", c.REWARD_TERM),
        ("health/term_latency_p95/", "", c.PREFIX + "rl.health.term.latency.p95", c.REWARD_TERM),
    ),
}
_HISTOGRAMS: dict[str, Route] = {
    "reward": _r("rl.rollout.reward"),
    "completion_length": _r("rl.rollout.completion.length"),
}


def _between(name: str, prefix: str, suffix: str) -> str | None:
    if len(name) <= len(prefix) + len(suffix):
        return None
    if not (name.startswith(prefix) and name.endswith(suffix)):
        return None
    middle = name[len(prefix) : len(name) - len(suffix)]
    return middle or None


def _attrs(r: Route) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.attributes.items())
