"""The verify task: a run's published step figures checked against its kept rollouts, and its
kept rollouts against its reward, on the CPUs of a node of the run's pool.

For each step (in order, one attempt's steps after another's): the step file is read; every
figure is counted again by `rewards.recount` (not by the code the engines publish with) and
compared with what the step published; each rollout is scored again by the run's own reward
terms exactly as a training job scores them (`RewardScorer`, rule terms from their pinned
bundles, as a regrade does), and its kept score, shares and values compared with the new ones.
Judge and http terms are not scored again (a remote model need not answer the same twice):
their kept values stand in the score. A rule term receives the rollout's prompt, completion and
expected answer; its `row` holds those two columns only, as a regrade's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from akka_training.core.plans import Reward
from akka_training.core.tasks import (
    FigureDifference,
    RolloutDifference,
    VerifiedStep,
    VerifyParams,
    VerifyResult,
    VerifySource,
)
from akka_training.engines.failures import RewardError
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.regrade import input_of, resolver
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.recount import History, StepFile, prompt_tokens, recount
from akka_training.rewards.rollouts import Rollout, read_step_file
from akka_training.rewards.scorer import RewardScorer

# Published figures are floats that went through JSON: equal within float rounding.
RELATIVE = 1e-6
ABSOLUTE = 1e-9
REMOTE_KINDS = ("judge", "http")


def verify(task: TaskContext) -> dict[str, Any]:
    params = VerifyParams.model_validate(task.spec.params)
    remote = [t.name for t in params.reward.terms if t.kind in REMOTE_KINDS]
    local = Reward(
        terms=[t for t in params.reward.terms if t.kind not in REMOTE_KINDS],
        max_concurrency=params.reward.max_concurrency,
    )
    unchecked = [
        f"The {', '.join(remote)} term(s) were not scored again: a judge or http term need not "
        "give the same score twice, so their kept values stand; nor were their latencies "
        "(timings are not kept)."
    ]
    if not remote:
        unchecked = []
    if params.tools:
        unchecked.append(
            "tools/* figures are not recounted: the engines count the calls the tools served."
        )
    count = _token_counter(task, params, unchecked)
    scorer = _scorer(task, params, local) if local.terms else None
    result = VerifyResult(run=task.spec.run_id or "run", steps=[], differences=[], rollouts=[])
    histories: dict[int, History] = {}
    total = len(params.steps)
    try:
        for done, source in enumerate(params.steps):
            task.progress(f"verifying step {source.step}", done, total)
            data = _step_bytes(task, source)
            step = StepFile.read(data)
            figures = recount(step, params.max_completion_tokens, remote)
            if figures:
                history = histories.setdefault(
                    source.attempt, History(params.baseline_steps, params.correctness_term)
                )
                figures |= history.add(figures)
                if count is not None:
                    figures["tokens"] = prompt_tokens(step, count)
            result.differences += _figure_differences(source, figures)
            kept = read_step_file(data)
            rescored = _rescored(scorer, source.step, kept, params.reward, remote)
            result.rollouts += rescored
            result.steps.append(
                VerifiedStep(
                    step=source.step,
                    rollouts=step.table.num_rows,
                    figures=sum(1 for name in figures if name in source.published),
                    rescored=len(kept) if scorer is not None else 0,
                )
            )
        task.progress("verified", total, total)
    finally:
        if scorer is not None:
            scorer.close()
    result.unchecked = unchecked
    return result.to_json()


def _step_bytes(task: TaskContext, source: VerifySource) -> bytes:
    try:
        return task.store.get_bytes(source.blob)
    except FileNotFoundError as exc:
        raise TaskError(
            f"The rollouts of step {source.step} are missing from storage ({source.blob}), so "
            "its figures cannot be verified."
        ) from exc


def _figure_differences(source: VerifySource, figures: dict[str, float]) -> list[FigureDifference]:
    out = []
    for name, value in sorted(figures.items()):
        shown = source.published.get(name)
        if shown is None or not math.isclose(shown, value, rel_tol=RELATIVE, abs_tol=ABSOLUTE):
            out.append(
                FigureDifference(step=source.step, figure=name, published=shown, recomputed=value)
            )
    return out


def _rescored(
    scorer: RewardScorer | None,
    step: int,
    kept: list[Rollout],
    reward: Reward,
    remote: list[str],
) -> list[RolloutDifference]:
    if scorer is None or not kept:
        return []
    scored = scorer.score([input_of(r) for r in kept])
    weights = {t.name: t.weight for t in reward.terms}
    out: list[RolloutDifference] = []
    for rollout, new in zip(kept, scored.rollouts, strict=True):
        score = math.fsum(
            [*(new.shares.get(n, 0.0) for n in weights if n not in remote)]
            + [rollout.shares.get(n, 0.0) for n in remote]
        )
        pairs: list[tuple[str, float | None, float | None]] = [("score", rollout.score, score)]
        for name in weights:
            if name in remote:
                continue
            pairs.append((f"values.{name}", rollout.values.get(name), new.values.get(name)))
            pairs.append((f"shares.{name}", rollout.shares.get(name), new.shares.get(name)))
        for name, was, now in pairs:
            if not _same(was, now):
                out.append(
                    RolloutDifference(
                        step=step, index=rollout.index, field=name, kept=was, rescored=now
                    )
                )
    return out


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=RELATIVE, abs_tol=ABSOLUTE)


def _scorer(task: TaskContext, params: VerifyParams, reward: Reward) -> RewardScorer:
    resolve = resolver(task, params.bundles, task.workdir / "bundles")
    try:
        return RewardScorer.from_reward(reward, bundle_resolver=resolve)
    except (RewardSetupError, RewardError) as exc:
        raise TaskError(f"The run's reward cannot score its rollouts again: {exc}") from exc


def _token_counter(task: TaskContext, params: VerifyParams, unchecked: list[str]) -> Any:
    """How many tokens a prompt is, as the TRL engine counts them; None (and why, in
    `unchecked`) when the ``tokens`` figure cannot be recounted."""
    why = None
    if params.engine != "trl":
        why = f"the {params.engine} engine counts them its own way"
    elif params.tools:
        why = "the run declared tools, whose schema each prompt carries"
    elif params.base_model is not None and params.base_model.modality != "text":
        why = "the run's prompts hold images"
    if why is not None:
        unchecked.append(f"tokens is not recounted: {why}.")
        return None
    tokenizer = _tokenizer(task, params)
    if tokenizer is None:
        unchecked.append(
            "tokens is not recounted: neither the run's tokenizer nor its base model could be "
            "read here."
        )
        return None

    def count(prompt: object) -> int:
        if isinstance(prompt, str):
            return len(tokenizer(text=prompt)["input_ids"])
        encoded = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return len(encoded["input_ids"])

    return count


def _tokenizer(task: TaskContext, params: VerifyParams) -> Any:
    # Imported here: a verification of a run without a tokenizer to read needs none of it.
    from transformers import AutoTokenizer

    places: list[str] = []
    if params.tokenizer and task.store.list(params.tokenizer):
        places.append(str(task.store.get_dir(params.tokenizer, task.workdir / "tokenizer")))
    if params.base_model is not None and Path(params.base_model.path).is_dir():
        places.append(params.base_model.path)
    for place in places:
        try:
            return AutoTokenizer.from_pretrained(place)
        except (OSError, ValueError):
            continue
    return None
