"""The evaluation task: the base model (with the source run's adapter, if any) generates
`samplesPerPrompt` completions for every prompt of the dataset, the reward terms of the plan
score each one, `loss` measures the expected answers, and `pass@k` counts prompts; every
scored sample goes to the blob store as JSONL and the metrics, each with its 95% interval,
are the task's result (`core.evaluations`). The job publishes its metrics and spans (load,
generate, score, save) as `telemetry.evaluation_metrics` describes.

Generation decodes greedily at temperature 0 and samples otherwise, seeded by the plan.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.core.evaluations import (
    REWARD_KINDS,
    EvaluateParams,
    EvaluationResult,
    LossMetric,
    MetricValue,
    PassAtKMetric,
    PreferenceMetric,
    interval,
    pass_at_k,
)
from akka_training.core.resolved import BASE_REFERENCE, ReferencePin
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.data import RlRow, preference_examples, read_rows, rl_rows
from akka_training.engines.failures import DataError, SourceUnavailable
from akka_training.engines.model_cache import local_model
from akka_training.engines.snapshots import download_adapter
from akka_training.engines.tasks.context import TaskContext, TaskError
from akka_training.engines.tasks.preference_eval import REFERENCE_ADAPTER, pair_samples
from akka_training.rewards.bundles import unpack_bundle
from akka_training.rewards.inputs import RewardSetupError, RolloutInput, prompt_text
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.terms import TermSpec
from akka_training.telemetry import catalog as c
from akka_training.telemetry.evaluation_metrics import EvaluationTelemetry, evaluation_resource
from akka_training.telemetry.placement import namespace_name
from akka_training.telemetry.tracing import job_traceparent

log = logging.getLogger(__name__)


def evaluate(task: TaskContext) -> dict[str, Any]:
    params = EvaluateParams.model_validate(task.spec.params)
    placement = task.placement
    telemetry = EvaluationTelemetry(
        evaluation_resource(
            task.spec.task_id,
            task.spec.project,
            run_id=task.spec.run_id,
            pod=placement.pod if placement else None,
            node=placement.node if placement else None,
            namespace=namespace_name(),
        ),
        task.spec.telemetry.collector_endpoint,
        job_traceparent(task.spec.telemetry.traceparent),
    )
    try:
        with telemetry.job({c.PROJECT: task.spec.project, c.EVALUATION_ID: task.spec.task_id}):
            return _evaluate(task, params, telemetry)
    finally:
        telemetry.shutdown()


def _evaluate(
    task: TaskContext, params: EvaluateParams, telemetry: EvaluationTelemetry
) -> dict[str, Any]:
    torch.manual_seed(params.seed)
    preference = [m for m in params.metrics if isinstance(m, PreferenceMetric)]
    if preference:
        return _evaluate_pairs(task, params, preference[0], telemetry)
    terms: list[TermSpec] = [m for m in params.metrics if m.kind in REWARD_KINDS]  # type: ignore[misc]
    try:
        rows = rl_rows(read_rows(task.store, params.dataset))
    except DataError as exc:
        raise TaskError(f"the evaluation's dataset cannot be read: {exc}") from exc
    if not rows:
        raise TaskError("the evaluation's dataset has no rows")
    try:
        scorer = RewardScorer(terms, bundle_resolver=_bundles(task, params)) if terms else None
    except RewardSetupError as exc:
        raise TaskError(f"a metric of the evaluation cannot run: {exc}") from exc

    try:
        with telemetry.phase("load"):
            task.progress(f"loading the base model {params.base_model.id}")
            tokenizer, model = _load(task, params)

        wants_loss = any(isinstance(m, LossMetric) for m in params.metrics)
        generated: list[list[tuple[str, int, str]]] = []
        row_losses: list[float | None] = []
        with telemetry.phase("generate"):
            for number, row in enumerate(rows):
                task.progress("generating", number, len(rows))
                completions = _generate(tokenizer, model, row, params)
                generated.append(completions)
                telemetry.generated(tokens for _, tokens, _ in completions)
                row_losses.append(
                    _loss(tokenizer, model, row)
                    if wants_loss and row.expected is not None
                    else None
                )
            task.progress("generating", len(rows), len(rows))

        with telemetry.phase("score"):
            samples = _scored(task, scorer, rows, generated, row_losses, telemetry)
    finally:
        if scorer is not None:
            scorer.close()

    losses = [loss for loss in row_losses if loss is not None]
    per_prompt = params.generation.samples_per_prompt
    values = [_metric(m, samples, losses, per_prompt) for m in params.metrics]
    telemetry.results((v.name, v.mean, v.low, v.high) for v in values)
    with telemetry.phase("save"):
        task.progress("saving the scored samples")
        body = "".join(json.dumps(s, sort_keys=True) + "\n" for s in samples).encode()
        task.store.put_bytes(params.samples, body)
    return EvaluationResult(
        metrics=values, samples=params.samples, sample_count=len(samples), prompts=len(rows)
    ).to_json()


def _evaluate_pairs(
    task: TaskContext,
    params: EvaluateParams,
    metric: PreferenceMetric,
    telemetry: EvaluationTelemetry,
) -> dict[str, Any]:
    """A preference evaluation: no generation, each pair scored by its log-probabilities
    (`preference_eval`)."""
    try:
        examples = preference_examples(read_rows(task.store, params.dataset))
    except DataError as exc:
        raise TaskError(f"the evaluation's dataset cannot be read: {exc}") from exc
    with telemetry.phase("load"):
        task.progress(f"loading the base model {params.base_model.id}")
        tokenizer, model = _load(task, params)
        reference = params.reference or BASE_REFERENCE
        adapter = _load_reference(task, model, reference)
    with telemetry.phase("score"):
        task.progress("scoring pairs", 0, len(examples))
        samples = pair_samples(tokenizer, model, examples, metric.name, adapter)
        telemetry.scored(len(samples))
        task.progress("scoring pairs", len(examples), len(examples))
    values = [
        _metric(metric, samples, [], 1).model_copy(update={"reference": reference.describe()})
    ]
    telemetry.results((v.name, v.mean, v.low, v.high) for v in values)
    with telemetry.phase("save"):
        body = "".join(json.dumps(s, sort_keys=True) + "\n" for s in samples).encode()
        task.store.put_bytes(params.samples, body)
    return EvaluationResult(
        metrics=values, samples=params.samples, sample_count=len(samples), prompts=len(samples)
    ).to_json()


def _scored(
    task: TaskContext,
    scorer: RewardScorer | None,
    rows: list[RlRow],
    generated: list[list[tuple[str, int, str]]],
    row_losses: list[float | None],
    telemetry: EvaluationTelemetry,
) -> list[dict[str, Any]]:
    """Every sample with its scores, in the order of the rows and their samples."""
    samples: list[dict[str, Any]] = []
    for number, (row, completions, row_loss) in enumerate(
        zip(rows, generated, row_losses, strict=True)
    ):
        task.progress("scoring", number, len(rows))
        scored = None
        if scorer is not None:
            scored = scorer.score(
                [
                    RolloutInput(
                        prompt=row.prompt,
                        completion=text,
                        expected=row.expected,
                        completion_tokens=tokens,
                        group=number,
                        finish_reason=finish,  # type: ignore[arg-type]
                    )
                    for text, tokens, finish in completions
                ]
            ).rollouts
            telemetry.scored(len(completions))
        for j, (text, tokens, finish) in enumerate(completions):
            one = scored[j] if scored is not None else None
            samples.append(
                {
                    "index": row.index,
                    "sample": j,
                    "prompt": prompt_text(row.prompt),
                    "completion": text,
                    "expected": row.expected,
                    "completionTokens": tokens,
                    "finishReason": finish,
                    "score": one.score if one else 0.0,
                    "values": one.values if one else {},
                    "failures": one.failures if one else {},
                    "explanations": one.explanations if one else {},
                    "loss": row_loss,
                }
            )
    task.progress("scoring", len(rows), len(rows))
    return samples


def _metric(
    metric: Any, samples: list[dict[str, Any]], losses: list[float], per_prompt: int
) -> MetricValue:
    if isinstance(metric, LossMetric):
        numbers = losses
    elif isinstance(metric, PassAtKMetric):
        k = metric.k or per_prompt
        by_prompt: dict[int, list[float]] = {}
        for s in samples:
            by_prompt.setdefault(s["index"], []).append(s["values"].get(metric.term, 0.0))
        numbers = [
            pass_at_k(len(v), sum(1 for x in v if x >= metric.threshold), k)
            for v in by_prompt.values()
        ]
    else:
        numbers = [float(s["values"].get(metric.name, 0.0)) for s in samples]
    mean, low, high, stderr = interval(numbers)
    return MetricValue(
        name=metric.name,
        kind=metric.kind,
        mean=mean,
        low=low,
        high=high,
        stderr=stderr,
        count=len(numbers),
    )


def _load_reference(task: TaskContext, model: Any, reference: ReferencePin) -> str | None:
    """Load a preference metric's reference adapter beside the evaluated one (its name), or
    None where the reference is the base model (the adapter disabled)."""
    if reference.kind == "base-model" or reference.weights is None:
        return None
    task.progress("fetching the reference adapter")
    try:
        directory = download_adapter(task.store, reference.weights, task.workdir / "reference")
    except SourceUnavailable as exc:
        raise TaskError(
            f"the reference adapter ({reference.describe()}) could not be read: {exc}"
        ) from exc
    if not isinstance(model, PeftModel):
        raise TaskError(
            f"the reference is an adapter ({reference.describe()}) but the evaluated model has "
            "none; evaluate a run's adapter, or set reference: base-model"
        )
    model.load_adapter(str(directory), adapter_name=REFERENCE_ADAPTER)
    model.eval()
    return REFERENCE_ADAPTER


def _load(task: TaskContext, params: EvaluateParams) -> tuple[Any, Any]:
    base = params.base_model
    path = local_model(base.path, task.spec.storage_s3)
    if not (Path(path) / "config.json").is_file():
        raise TaskError(
            f"the base model {base.id}'s weights are not available to the training cluster "
            f"(this node has no model at {path}); make its directory readable on the nodes"
        )
    tokenizer_dir = path
    if params.tokenizer and task.store.list(params.tokenizer):
        tokenizer_dir = str(task.store.get_dir(params.tokenizer, task.workdir / "tokenizer"))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.padding_side = "left"
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    if params.adapter is not None:
        task.progress("fetching the adapter")
        try:
            adapter = download_adapter(task.store, params.adapter, task.workdir / "adapter")
        except SourceUnavailable as exc:
            raise TaskError(f"the adapter to evaluate could not be read: {exc}") from exc
        model = PeftModel.from_pretrained(model, str(adapter))
    if torch.cuda.is_available():
        # Its claim's devices (the backend shows the job only those); none: the CPUs.
        model = model.to("cuda")
    model.eval()
    return tokenizer, model


def _encode_prompt(tokenizer: Any, prompt: list[dict[str, Any]] | str) -> list[int]:
    if isinstance(prompt, str):
        ids: list[int] = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        return ids
    encoded = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def _generate(
    tokenizer: Any, model: Any, row: RlRow, params: EvaluateParams
) -> list[tuple[str, int, str]]:
    """(text, tokens, finish reason) of each sample of `row`'s prompt."""
    generation = params.generation
    ids = torch.tensor([_encode_prompt(tokenizer, row.prompt)], device=model.device)
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": generation.temperature}
        if generation.temperature > 0
        else {"do_sample": False}
    )
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=generation.max_completion_tokens,
            num_return_sequences=generation.samples_per_prompt,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos,
            **sampling,
        )
    completions = []
    for sequence in out[:, ids.shape[1] :].tolist():
        finish = "length"
        if eos is not None and eos in sequence:
            sequence = sequence[: sequence.index(eos)]
            finish = "stop"
        text = tokenizer.decode(sequence, skip_special_tokens=True).strip()
        completions.append((text, len(sequence), finish))
    return completions


def _loss(tokenizer: Any, model: Any, row: RlRow) -> float:
    """The mean token loss of the expected answer (and the end of the turn) after the prompt."""
    assert row.expected is not None
    prompt = _encode_prompt(tokenizer, row.prompt)
    answer = tokenizer(row.expected, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        answer = [*answer, tokenizer.eos_token_id]
    ids = torch.tensor([prompt + answer], device=model.device)
    labels = torch.tensor([[-100] * len(prompt) + answer], device=model.device)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
    return float(out.loss)


def _bundles(task: TaskContext, params: EvaluateParams) -> BundleResolver:
    root = task.workdir / "bundles"

    def resolve(ref: str) -> Path:
        pin = params.bundles.get(ref)
        if pin is None:
            raise TaskError(f"the scoring bundle {ref} is not pinned in the evaluation")
        data = task.store.get_bytes(pin.blob)
        digest = pin.sha256.lower().removeprefix("sha256:")
        return unpack_bundle(data, pin.sha256, root / digest[:16])

    return resolve
