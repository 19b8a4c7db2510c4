"""The evaluation task: the base model (with the source run's adapter, if any) generates
`samplesPerPrompt` completions for every prompt of the dataset, the reward terms of the plan
score each one, `loss` measures the expected answers, and `pass@k` counts prompts; every
scored sample goes to the blob store as JSONL and the metrics, each with its 95% interval,
are the task's result (`core.evaluations`). The job publishes its metrics and spans (load,
generate, score, save) as `telemetry.evaluation_metrics` describes.

What generates is chosen as an endpoint's engine is (`trainer.endpoints.engine`, carried in the
params; `engines.serving.vllm.choose`), and the result names it:

- vLLM: the OpenAI server endpoints run (`VllmServer`), a child process from vLLM's environment,
  the evaluated adapter loaded in it as a LoRA adapter, every prompt one completions request
  (its samples as ``n``, seeded from the plan's seed and the row), many in flight for vLLM to
  batch (`vllm_generate`). It is stopped before the loss loads the model.
- transformers: the one generation engine (`engines.generation`): the base model once, the
  run's adapter held on it by name, and the prompts answered in batches of prompts of like
  length (`batches`) rather than one `generate` a row, each sample from its own generator,
  seeded from the plan's seed and its position (row and sample).

Either decodes greedily at temperature 0 and samples otherwise, and repeats a sampled
evaluation whatever its batches. `loss` is always transformers' (`_loss`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from akka_training.core.evaluations import (
    REWARD_KINDS,
    EvaluateParams,
    EvaluationResult,
    Generation,
    LossMetric,
    MetricValue,
    PassAtKMetric,
    PreferenceMetric,
    interval,
    pass_at_k,
)
from akka_training.core.resolved import BASE_REFERENCE, ReferencePin
from akka_training.core.serving import VLLM, ServeParams
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.data import RlRow, preference_examples, read_rows, rl_rows
from akka_training.engines.failures import DataError, SourceUnavailable
from akka_training.engines.generation import BASE, GenerationRequest, SamplingParams
from akka_training.engines.generation.engine import GenerationEngine
from akka_training.engines.model_cache import local_model
from akka_training.engines.serving.vllm import VllmFailed, VllmServer, choose
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

# The most completions one batch generates, and the most tokens (each completion's prompt and
# its longest answer) it holds: the memory of a batch's cache is bounded by the second.
BATCH_COMPLETIONS = 64
BATCH_TOKENS = 65536
# The name the evaluated adapter is held under in the engine.
ADAPTER = "evaluated"
# Completions requests in flight at once to vLLM's server (it batches them as they come).
VLLM_CONCURRENT = 64
# The LoRA rank limits vLLM takes (`--max-lora-rank`).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


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
        wants_loss = any(isinstance(m, LossMetric) for m in params.metrics) and any(
            row.expected is not None for row in rows
        )
        model_dir = _model_dir(task, params)
        kind = _engine_kind(params, model_dir)
        if kind == VLLM:
            with telemetry.phase("load"):
                tokenizer, server, adapter = _start_vllm(task, params, model_dir)
            with telemetry.phase("generate"):
                task.progress("generating", 0, len(rows))
                prompts = [_encode_prompt(tokenizer, row.prompt) for row in rows]
                stops = eos_ids(model_dir, tokenizer)
                try:
                    generated = _collect(
                        task,
                        telemetry,
                        len(rows),
                        vllm_generate(
                            server,
                            adapter,
                            prompts,
                            params.generation,
                            params.seed,
                            tokenizer,
                            stops,
                        ),
                    )
                except VllmFailed as exc:
                    raise TaskError(
                        f"{exc.message.rstrip('.')}; set trainer.endpoints.engine to "
                        "transformers to generate the evaluation without vLLM",
                        exc.detail,
                    ) from exc
                finally:
                    server.close()  # by its pid; its memory given back before the loss
                # The loss is transformers' own cross-entropy, as where transformers generates.
                row_losses: list[float | None] = [None] * len(rows)
                if wants_loss:
                    task.progress("measuring the loss")
                    engine, adapter = _load_engine(task, params, model_dir, tokenizer)
                    row_losses = _losses(tokenizer, engine, adapter, prompts, rows)
        else:
            with telemetry.phase("load"):
                task.progress(f"loading the base model {params.base_model.id}")
                tokenizer = _tokenizer(task, params, model_dir)
                engine, adapter = _load_engine(task, params, model_dir, tokenizer)
            with telemetry.phase("generate"):
                task.progress("generating", 0, len(rows))
                prompts = [_encode_prompt(tokenizer, row.prompt) for row in rows]
                generated = _collect(
                    task,
                    telemetry,
                    len(rows),
                    generate(engine, adapter, prompts, params.generation, params.seed),
                )
                row_losses = [None] * len(rows)
                if wants_loss:
                    row_losses = _losses(tokenizer, engine, adapter, prompts, rows)

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
        metrics=values,
        samples=params.samples,
        sample_count=len(samples),
        prompts=len(rows),
        engine=kind,
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
    """The tokenizer and the model, with the adapter to evaluate on it (the preference
    evaluation's log-probabilities)."""
    model_dir = _model_dir(task, params)
    tokenizer = _tokenizer(task, params, model_dir)
    model = _base(model_dir)
    adapter = _fetch_adapter(task, params)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter))
    model = model.to(_device())
    model.eval()
    return tokenizer, model


def _load_engine(
    task: TaskContext, params: EvaluateParams, model_dir: Path, tokenizer: Any
) -> tuple[GenerationEngine, str]:
    """The transformers generation engine over the base model, and the name of what is
    evaluated in it: the adapter it holds, or `BASE`."""
    device = _device()
    model = _base(model_dir).to(device)
    model.eval()
    engine = GenerationEngine(model_dir, device=device, model=model, tokenizer=tokenizer)
    adapter = _fetch_adapter(task, params)
    if adapter is None:
        return engine, BASE
    engine.add_adapter(ADAPTER, adapter)
    return engine, ADAPTER


def _device() -> str:
    # Its claim's devices (the backend shows the job only those); none: the CPUs.
    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_dir(task: TaskContext, params: EvaluateParams) -> Path:
    """The base model's directory on this node."""
    base = params.base_model
    path = local_model(base.path, task.spec.storage_s3)
    if not (Path(path) / "config.json").is_file():
        raise TaskError(
            f"the base model {base.id}'s weights are not available to the training cluster "
            f"(this node has no model at {path}); make its directory readable on the nodes"
        )
    return Path(path)


def _tokenizer(task: TaskContext, params: EvaluateParams, model_dir: Path) -> Any:
    """The tokenizer: the source run's, where it saved one, else the base model's."""
    tokenizer_dir = str(model_dir)
    if params.tokenizer and task.store.list(params.tokenizer):
        tokenizer_dir = str(task.store.get_dir(params.tokenizer, task.workdir / "tokenizer"))
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.padding_side = "left"
    return tokenizer


def _base(model_dir: Path) -> Any:
    """The base model, on the CPU."""
    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="auto")


def _engine_kind(params: EvaluateParams, model_dir: Path) -> str:
    """`VLLM` or `TRANSFORMERS`, chosen as an endpoint's engine is (`trainer.endpoints.engine`);
    an explicit ``vllm`` that cannot work here fails the evaluation, saying why."""
    try:
        return choose(
            params.engine,
            params.base_model,
            params.vllm_python,
            model_dir,
            on_gpu=_device() == "cuda",
            fallback="generate the evaluation with transformers",
        )
    except VllmFailed as exc:
        raise TaskError(exc.message, exc.detail) from exc


def _fetch_adapter(task: TaskContext, params: EvaluateParams) -> Path | None:
    if params.adapter is None:
        return None
    task.progress("fetching the adapter")
    try:
        return download_adapter(task.store, params.adapter, task.workdir / "adapter")
    except SourceUnavailable as exc:
        raise TaskError(f"the adapter to evaluate could not be read: {exc}") from exc


def _encode_prompt(tokenizer: Any, prompt: list[dict[str, Any]] | str) -> list[int]:
    if isinstance(prompt, str):
        ids: list[int] = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        return ids
    encoded = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def batches(prompt_lengths: Sequence[int], per_prompt: int, max_tokens: int) -> Iterator[list[int]]:
    """The prompts' positions in the batches they are generated in: longest prompts first (a
    batch too big for the device fails at once, not at the end), prompts of like length
    together (little padding), each batch within `BATCH_COMPLETIONS` completions and
    `BATCH_TOKENS` tokens, and never empty."""
    order = sorted(range(len(prompt_lengths)), key=lambda i: -prompt_lengths[i])
    batch: list[int] = []
    for i in order:
        longest = prompt_lengths[batch[0]] if batch else prompt_lengths[i]
        completions = (len(batch) + 1) * per_prompt
        if batch and (
            completions > BATCH_COMPLETIONS or completions * (longest + max_tokens) > BATCH_TOKENS
        ):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def generate(
    engine: GenerationEngine,
    adapter: str,
    prompts: Sequence[Sequence[int]],
    generation: Generation,
    seed: int,
) -> Iterator[list[tuple[int, list[tuple[str, int, str]]]]]:
    """Each batch's prompts as they are answered: a prompt's position and the (text, tokens,
    finish reason) of each of its `samplesPerPrompt` samples, under `adapter` (`BASE`: the base
    model). Sample j of prompt i is seeded with ``seed + i * samplesPerPrompt + j``."""
    per_prompt = generation.samples_per_prompt
    for batch in batches([len(p) for p in prompts], per_prompt, generation.max_completion_tokens):
        requests = [
            GenerationRequest(
                tuple(prompts[i]),
                adapter,
                SamplingParams(
                    max_tokens=generation.max_completion_tokens,
                    temperature=generation.temperature,
                    seed=seed + i * per_prompt,
                    n=per_prompt,
                ),
            )
            for i in batch
        ]
        results = engine.generate(requests)
        yield [
            (i, [(c.text.strip(), len(c.token_ids), c.finish_reason) for c in result.completions])
            for i, result in zip(batch, results, strict=True)
        ]


def _collect(
    task: TaskContext,
    telemetry: EvaluationTelemetry,
    total: int,
    answered: Iterator[list[tuple[int, list[tuple[str, int, str]]]]],
) -> list[list[tuple[str, int, str]]]:
    """Every row's completions, in the rows' order, reporting the progress as they come."""
    generated: list[list[tuple[str, int, str]]] = [[] for _ in range(total)]
    done = 0
    for batch in answered:
        for number, completions in batch:
            generated[number] = completions
            telemetry.generated(tokens for _, tokens, _ in completions)
        done += len(batch)
        task.progress("generating", done, total)
    return generated


def _losses(
    tokenizer: Any,
    engine: GenerationEngine,
    adapter: str,
    prompts: list[list[int]],
    rows: list[RlRow],
) -> list[float | None]:
    return [
        _loss(tokenizer, engine, adapter, prompt, row.expected)
        if row.expected is not None
        else None
        for prompt, row in zip(prompts, rows, strict=True)
    ]


def _start_vllm(
    task: TaskContext, params: EvaluateParams, model_dir: Path
) -> tuple[Any, VllmServer, str]:
    """The tokenizer, vLLM's server over the base model (the one endpoints run, a child
    process), and the name of what is evaluated in it: the adapter it loaded, or `BASE`."""
    task.progress(f"starting vLLM's server over {params.base_model.id}")
    tokenizer = _tokenizer(task, params, model_dir)
    adapter_dir = _fetch_adapter(task, params)
    serving = ServeParams(
        endpoint=f"evaluation {task.spec.task_id}",
        base_model=params.base_model,
        gpus=params.gpus,
        engine="vllm",
        vllm_python=params.vllm_python,
        max_loras=1,
        max_lora_rank=lora_rank(adapter_dir),
    )
    server = VllmServer(serving, model_dir, task.workdir, on_gpu=_device() == "cuda")
    try:
        server.wait_ready()
        if adapter_dir is None:
            return tokenizer, server, BASE
        task.progress("loading the adapter into vLLM")
        server.add_adapter(ADAPTER, adapter_dir)
        return tokenizer, server, ADAPTER
    except BaseException as exc:
        server.close()  # by its pid: nothing of it outlives a start that failed
        if isinstance(exc, VllmFailed):
            raise TaskError(exc.message, exc.detail) from exc
        raise


def lora_rank(adapter: Path | None) -> int:
    """The smallest LoRA rank limit vLLM takes that holds the adapter's rank (`r`)."""
    rank = 8
    if adapter is not None:
        try:
            config = json.loads((adapter / "adapter_config.json").read_text())
            rank = int(config.get("r") or rank)
        except (OSError, ValueError):
            pass
    return next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])


def eos_ids(model_dir: Path, tokenizer: Any) -> frozenset[int]:
    """The tokens that end an answer: the model's generation config's and the tokenizer's
    end-of-sequence tokens (those the transformers engine stops at)."""
    ids: set[int] = set()
    configured: Any = None
    try:
        configured = json.loads((model_dir / "generation_config.json").read_text())
        configured = configured.get("eos_token_id")
    except (OSError, ValueError):
        pass
    for value in (configured, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def vllm_generate(
    server: VllmServer,
    adapter: str,
    prompts: Sequence[Sequence[int]],
    generation: Generation,
    seed: int,
    tokenizer: Any,
    stops: frozenset[int],
) -> Iterator[list[tuple[int, list[tuple[str, int, str]]]]]:
    """`generate`'s answers, by vLLM's server: one completions request a prompt (its
    `samplesPerPrompt` samples as ``n``, seeded with ``seed + i * samplesPerPrompt``), up to
    `VLLM_CONCURRENT` in flight for vLLM to batch, yielded as they come in groups of up to
    `BATCH_COMPLETIONS` completions. A sample ends at any of `stops` (`eos_ids`: the model's
    and the tokenizer's end tokens, as the transformers engine stops), its token count leaves
    out the end token, as that engine counts, and its text is its tokens decoded by
    `tokenizer`."""
    per_prompt = generation.samples_per_prompt
    # Greedy, every sample is the one completion (and vLLM takes no n above 1).
    greedy = generation.temperature == 0

    def one(i: int) -> tuple[int, list[tuple[str, int, str]]]:
        answer = server.complete(
            {
                "model": adapter,
                "prompt": list(prompts[i]),
                "max_tokens": generation.max_completion_tokens,
                "temperature": generation.temperature,
                # The whole distribution, as the transformers engine samples (the server
                # takes no defaults from the model's generation_config.json).
                "top_p": 1.0,
                # Where the tokenizer is the run's, its end token too.
                "stop_token_ids": sorted(stops),
                "n": 1 if greedy else per_prompt,
                "seed": seed + i * per_prompt,
                "return_token_ids": True,
            }
        )
        samples = []
        for choice in sorted(answer["choices"], key=lambda c: int(c["index"])):
            tokens = list(choice.get("token_ids") or [])
            finish = str(choice.get("finish_reason") or "length")
            if finish == "stop" and tokens and tokens[-1] in stops:
                tokens = tokens[:-1]
            # Decoded here, whole, as the transformers engine decodes (vLLM's own text holds
            # back a character still being decoded at the end).
            text = str(tokenizer.decode(tokens, skip_special_tokens=True))
            samples.append((text.strip(), len(tokens), finish))
        return i, samples * per_prompt if greedy else samples

    group = max(1, BATCH_COMPLETIONS // per_prompt)
    pool = ThreadPoolExecutor(max_workers=VLLM_CONCURRENT)
    try:
        futures = [pool.submit(one, i) for i in range(len(prompts))]
        answered: list[tuple[int, list[tuple[str, int, str]]]] = []
        for future in as_completed(futures):
            answered.append(future.result())
            if len(answered) >= group:
                yield answered
                answered = []
        if answered:
            yield answered
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _loss(
    tokenizer: Any, engine: GenerationEngine, adapter: str, prompt: list[int], expected: str
) -> float:
    """The mean token loss of the expected answer (and the end of the turn) after the prompt."""
    answer: list[int] = tokenizer(expected, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        answer = [*answer, tokenizer.eos_token_id]
    if not answer:
        return float("nan")
    # One log-probability a token from the second on: the answer's start at len(prompt) - 1.
    logprobs = engine.prompt_logprobs([*prompt, *answer], adapter)[max(len(prompt) - 1, 0) :]
    return -sum(logprobs) / len(logprobs)


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
