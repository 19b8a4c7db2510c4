"""The RL figures of one step, computed from its rollouts alone.

Every figure is recomputable from the step file, with these definitions (``std`` is always
the population standard deviation, ``sqrt(mean((x - mean(x))^2))``, as `statistics.pstdev`):

- ``reward/mean|std|min|max``: over the rollouts' scores.
- ``terms/<name>/share_mean|share_std``: over the rollouts' shares of term ``<name>`` (weight x
  value), for each term in the step's weights.
- ``completions/min_length|max_length|mean_length``: over ``completion_tokens``.
- ``completions/mean_terminated_length``: mean ``completion_tokens`` of the rollouts whose
  ``finish_reason`` is ``stop``; absent when there are none.
- ``completions/clipped_ratio``: share of rollouts cut at the limit: ``finish_reason`` is
  ``length`` or ``completion_tokens >= max_completion_tokens``.
- ``groups/frac_zero_std``: share of prompt groups (rollouts sharing ``group``) whose scores are
  all equal (max - min <= `EQUAL_TOLERANCE`): such a group teaches GRPO nothing.
- ``rollouts/frac_zero``: share of rollouts with ``|score| <= EQUAL_TOLERANCE``.
- ``rollouts/frac_full``: share of rollouts whose score reaches the total positive weight
  (the sum of the weights above 0), within `EQUAL_TOLERANCE`.
- ``tools/calls_per_completion``: mean ``tool_calls``; ``tools/failure_share``:
  ``sum(tool_failures) / sum(tool_calls)``. Both only when some rollout called a tool.

An empty step has no figures.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

from akka_training.rewards.rollouts import Rollout

EQUAL_TOLERANCE = 1e-9


def step_figures(
    rollouts: Sequence[Rollout], generations_per_prompt: int, max_completion_tokens: int
) -> dict[str, float]:
    """The step's figures by name (see the module docstring). `generations_per_prompt`
    bounds a group's size: a larger group means the rollouts' ``group`` is wrong."""
    if not rollouts:
        return {}
    scores = [r.score for r in rollouts]
    lengths = [r.completion_tokens for r in rollouts]
    figures: dict[str, float] = {
        "reward/mean": statistics.fmean(scores),
        "reward/std": statistics.pstdev(scores),
        "reward/min": min(scores),
        "reward/max": max(scores),
    }
    for name in term_names(rollouts):
        shares = [r.shares.get(name, 0.0) for r in rollouts]
        figures[f"terms/{name}/share_mean"] = statistics.fmean(shares)
        figures[f"terms/{name}/share_std"] = statistics.pstdev(shares)
    figures["completions/min_length"] = float(min(lengths))
    figures["completions/max_length"] = float(max(lengths))
    figures["completions/mean_length"] = statistics.fmean(lengths)
    terminated = [r.completion_tokens for r in rollouts if r.finish_reason == "stop"]
    if terminated:
        figures["completions/mean_terminated_length"] = statistics.fmean(terminated)
    clipped = [
        r.finish_reason == "length" or r.completion_tokens >= max_completion_tokens
        for r in rollouts
    ]
    figures["completions/clipped_ratio"] = _share(clipped)
    figures["groups/frac_zero_std"] = _share(
        max(g) - min(g) <= EQUAL_TOLERANCE for g in _groups(rollouts, generations_per_prompt)
    )
    figures["rollouts/frac_zero"] = _share(abs(s) <= EQUAL_TOLERANCE for s in scores)
    full = sum(w for w in rollouts[0].weights.values() if w > 0)
    figures["rollouts/frac_full"] = _share(abs(s - full) <= EQUAL_TOLERANCE for s in scores)
    calls = sum(r.tool_calls for r in rollouts)
    if calls > 0:
        figures["tools/calls_per_completion"] = calls / len(rollouts)
        figures["tools/failure_share"] = sum(r.tool_failures for r in rollouts) / calls
    return figures


def histogram_values(rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """Per-rollout values for the telemetry histograms: ``reward`` (scores), ``reward/<term>``
    (each term's share) and ``completion_length`` (tokens)."""
    values: dict[str, list[float]] = {"reward": [r.score for r in rollouts]}
    for name in term_names(rollouts):
        values[f"reward/{name}"] = [r.shares.get(name, 0.0) for r in rollouts]
    values["completion_length"] = [float(r.completion_tokens) for r in rollouts]
    return values


def term_names(rollouts: Sequence[Rollout]) -> list[str]:
    """The step's terms: its weights' names in plan order, then any other term a share
    names."""
    names = list(rollouts[0].weights) if rollouts else []
    for rollout in rollouts:
        for name in rollout.shares:
            if name not in names:
                names.append(name)
    return names


def _groups(rollouts: Sequence[Rollout], generations_per_prompt: int) -> list[list[float]]:
    groups: dict[int, list[float]] = defaultdict(list)
    for rollout in rollouts:
        groups[rollout.group].append(rollout.score)
    oversized = [g for g, scores in groups.items() if len(scores) > generations_per_prompt]
    if oversized:
        raise ValueError(
            f"group {oversized[0]} has {len(groups[oversized[0]])} rollouts, more than "
            f"generationsPerPrompt={generations_per_prompt}: the rollouts' groups are wrong"
        )
    return list(groups.values())


def _share(flags: Iterable[bool]) -> float:
    items = list(flags)
    return sum(items) / len(items) if items else 0.0
