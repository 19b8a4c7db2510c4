"""The regrade task: a run's kept rollouts scored again with another reward definition (other
terms, weights, a newer bundle version), step by step, on the CPUs of a node of the run's pool.

Each step file is read from the store, every rollout scored by the new reward's terms exactly
as a training job scores them (`RewardScorer`), and the new records kept as step files of the
task's own (`blobkeys.regrade_prefix`); the run's own files are only read. A rule term receives
the rollout's prompt, completion and expected answer; its `row` holds those two columns only
(the dataset row's other columns are not kept with a rollout).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from akka_training.core import blobkeys
from akka_training.core.resolved import BundlePin
from akka_training.core.tasks import RegradeParams, RegradeResult, RegradeStep
from akka_training.engines.failures import RewardError
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.rewards.bundles import unpack_bundle
from akka_training.rewards.inputs import RewardSetupError, RolloutInput
from akka_training.rewards.rollouts import (
    Rollout,
    read_step_file,
    rollouts_from_scores,
    step_file_bytes,
)
from akka_training.rewards.scorer import RewardScorer


def regrade(task: TaskContext) -> dict[str, Any]:
    params = RegradeParams.model_validate(task.spec.params)
    run_id = task.spec.run_id or "run"
    output = blobkeys.regrade_prefix(run_id, task.spec.task_id)
    resolve = resolver(task, params.bundles, task.workdir / "bundles")
    try:
        scorer = RewardScorer.from_reward(params.reward, bundle_resolver=resolve)
    except (RewardSetupError, RewardError) as exc:
        raise TaskError(f"The new reward cannot score rollouts: {exc}") from exc
    steps: list[RegradeStep] = []
    old_weights: dict[str, float] = {}
    total = len(params.steps)
    with scorer:
        for done, source in enumerate(params.steps):
            task.progress(f"scoring step {source.step}", done, total)
            try:
                old = read_step_file(task.store.get_bytes(source.blob))
            except FileNotFoundError as exc:
                raise TaskError(
                    f"The rollouts of step {source.step} are missing from storage "
                    f"({source.blob}); regrade the other steps with --steps."
                ) from exc
            if old and not old_weights:
                old_weights = dict(old[0].weights)
            batch = [input_of(r) for r in old]
            scored = scorer.score(batch)
            new = rollouts_from_scores(source.step, batch, scored, scorer.weights)
            task.store.put_bytes(output + f"step-{source.step}.parquet", step_file_bytes(new))
            steps.append(_figures(source.step, old, new))
        task.progress("scored", total, total)
        new_weights = scorer.weights
    return RegradeResult(
        output=output,
        old_weights=old_weights,
        new_weights=new_weights,
        old_mean=_mean([s.old_mean for s in steps], [s.count for s in steps]),
        new_mean=_mean([s.new_mean for s in steps], [s.count for s in steps]),
        steps=steps,
    ).to_json()


def input_of(r: Rollout) -> RolloutInput:
    """What the reward terms score of a kept rollout (a verification's too)."""
    return RolloutInput(
        prompt=r.prompt,
        completion=r.completion,
        expected=r.expected,
        completion_tokens=r.completion_tokens,
        row={"prompt": r.prompt, "expected": r.expected},
        group=r.group,
        finish_reason="length" if r.finish_reason == "length" else "stop",
        tool_calls=r.tool_calls,
        tool_failures=r.tool_failures,
    )


def _figures(step: int, old: list[Rollout], new: list[Rollout]) -> RegradeStep:
    failures: dict[str, int] = {}
    for r in new:
        for term in r.failures:
            failures[term] = failures.get(term, 0) + 1
    return RegradeStep(
        step=step,
        count=len(new),
        old_mean=_average([r.score for r in old]),
        new_mean=_average([r.score for r in new]),
        old_shares=_shares(old),
        new_shares=_shares(new),
        new_failures=failures,
    )


def _shares(rollouts: list[Rollout]) -> dict[str, float]:
    names: list[str] = []
    for r in rollouts:
        names += [n for n in r.shares if n not in names]
    return {n: _average([r.shares.get(n, 0.0) for r in rollouts]) for n in names}


def _average(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _mean(means: list[float], counts: list[int]) -> float:
    n = sum(counts)
    return sum(m * c for m, c in zip(means, counts, strict=True)) / n if n else 0.0


def resolver(task: TaskContext, pins: dict[str, BundlePin], root: Path) -> Any:
    """A scorer's bundle resolver over the bundles `pins` pins, unpacked under `root`."""

    def resolve(ref: str) -> Path:
        pin = pins.get(ref)
        if pin is None:
            raise RewardError(f"the scoring bundle {ref} is not pinned in the regrade's request")
        try:
            data = task.store.get_bytes(pin.blob)
        except FileNotFoundError as exc:
            raise RewardError(f"the scoring bundle {ref} is missing from storage") from exc
        digest = pin.sha256.lower().removeprefix("sha256:")
        return unpack_bundle(data, pin.sha256, root / digest[:16])

    return resolve
