"""The reward preview task: a plan's reward terms scored on a few of its dataset's rows before
any device is claimed. Each sampled row's reference answer (where the row has one), an empty
completion and the prompt itself are scored by every term, as a training job scores them; per
term the values are summarised and two mistakes are flagged: a term that gives the reference
answer 0, and a term that gives an empty completion full marks. With the run's settings it
also estimates memory and step time (`estimate`).
"""

from __future__ import annotations

from typing import Any

from akka_training.core.tasks import PreviewParams, PreviewResult, PreviewTerm
from akka_training.engines.data import read_rows, rl_rows
from akka_training.engines.failures import DataError, RewardError
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.estimate import estimate
from akka_training.engines.tasks.regrade import resolver
from akka_training.rewards.inputs import RewardSetupError, RolloutInput, prompt_text
from akka_training.rewards.scorer import RewardScorer

KINDS = ("reference", "empty", "prompt")


def preview(task: TaskContext) -> dict[str, Any]:
    params = PreviewParams.model_validate(task.spec.params)
    task.progress("reading the dataset")
    try:
        rows = rl_rows(read_rows(task.store, params.dataset))
    except DataError as exc:
        raise TaskError(f"The dataset's rows cannot be previewed: {exc}") from exc
    picked = sample(len(rows), params.rows)
    batch: list[RolloutInput] = []
    kinds: list[str] = []
    for i in picked:
        row = rows[i]
        columns = {"prompt": row.prompt, "expected": row.expected}
        candidates = [("empty", ""), ("prompt", prompt_text(row.prompt))]
        if row.expected is not None:
            candidates.insert(0, ("reference", row.expected))
        for kind, text in candidates:
            tokens = len(text.split())
            batch.append(RolloutInput(row.prompt, text, row.expected, tokens, columns, group=i))
            kinds.append(kind)
    resolve = resolver(task, params.bundles, task.workdir / "bundles")
    try:
        scorer = RewardScorer.from_reward(params.reward, bundle_resolver=resolve)
    except (RewardSetupError, RewardError) as exc:
        raise TaskError(f"The reward cannot score completions: {exc}") from exc
    task.progress(f"scoring {len(batch)} completions")
    with scorer:
        scored = scorer.score(batch)
        weights = scorer.weights
    terms = []
    for name, weight in weights.items():
        values: dict[str, list[float]] = {k: [] for k in KINDS}
        for kind, result in zip(kinds, scored.rollouts, strict=True):
            values[kind].append(result.values[name])
        summary = {k: _summary(v) for k, v in values.items() if v}
        terms.append(PreviewTerm(name=name, weight=weight, values=summary, flags=flags(values)))
    with_reference = sum(1 for i in picked if rows[i].expected is not None)
    estimated = None
    if params.settings is not None:
        task.progress("estimating memory and step time")
        estimated = estimate(params.settings, params.envelope_gpu_memory_gib, params.accelerator)
    return PreviewResult(
        rows=len(picked), with_reference=with_reference, terms=terms, estimate=estimated
    ).to_json()


def sample(total: int, wanted: int) -> list[int]:
    """`wanted` row positions spread evenly over `total` rows (all of them when fewer)."""
    if wanted >= total:
        return list(range(total))
    return sorted({(i * total) // wanted for i in range(wanted)})


def flags(values: dict[str, list[float]]) -> list[str]:
    out = []
    reference = values.get("reference") or []
    empty = values.get("empty") or []
    if reference and all(v == 0 for v in reference):
        out.append(
            f"gives the reference answer 0 on all {len(reference)} rows that have one: it "
            "cannot reward a correct completion"
        )
    if empty and all(v >= 1 for v in empty):
        out.append(
            f"gives an empty completion full marks on all {len(empty)} rows: the policy can "
            "earn it by saying nothing"
        )
    return out


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "count": float(len(values)),
        "min": min(values),
        "mean": sum(values) / len(values),
        "max": max(values),
    }
