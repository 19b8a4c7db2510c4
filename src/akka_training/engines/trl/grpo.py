"""GRPO and GSPO through TRL's GRPOTrainer with a LoRA adapter.

One flow, as for SFT: set up the model, the prompts (with their data fit), the reward, the tools,
the adapter and the resume point; report `training`; train, each step reported by
`StepReporting` through the job's step pipeline (the health monitors, the step files); save
the final adapter.

How the plan maps onto TRL: a step takes ``promptsPerStep`` prompts and samples
``generationsPerPrompt`` completions of each (``num_generations``). TRL counts completions, not
prompts, in ``per_device_train_batch_size``: the step is one generation batch of P x G
completions, updated as P micro-batches of one prompt group each (``gradient_accumulation_steps``
= ``steps_per_generation`` = P), which bounds the update's memory by one group. ``klBeta`` is
``beta`` (0 loads no reference model; with LoRA and beta > 0 TRL uses the base model with the
adapter disabled), the clip range is ``epsilon``/``epsilon_high``, and GSPO is
``importance_sampling_level="sequence"`` with ``loss_type="grpo"``.

TRL 1.16 does not truncate prompts: a prompt longer than ``maxSeqLength - maxCompletionTokens``
is dropped here and counted in the data fit.

Timings: TRL's own ``profiling/*`` timings do not reach callbacks, so generation is timed by
wrapping the trainer's generation and the reward by `StepRewards`; ``timing/update`` is the rest
of the step (log-probabilities, forward, backward, optimizer).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

from datasets import Dataset
from transformers import TrainerCallback, TrainerState
from trl.trainer.grpo_config import GRPOConfig
from trl.trainer.grpo_trainer import GRPOTrainer

from akka_training.core.defaults import CLIP_BY_METHOD
from akka_training.core.plans import Monitors, Reward, RlHyperparams
from akka_training.core.reports import JobSummary, TrainingReport
from akka_training.engines.adapters import adapted_modules, check_language_only
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.data import RlRow, read_rows, rl_rows
from akka_training.engines.datafit import prompt_length, rl_data_fit
from akka_training.engines.failures import DataError, RewardError
from akka_training.engines.flops import flop_parameters, peak_flops
from akka_training.engines.memory import StepMemory
from akka_training.engines.step_files import StepFileWriter, keep_step_file
from akka_training.engines.step_pipeline import StepPipeline, nothing_scored
from akka_training.engines.trl.common import (
    StopAt,
    common_args,
    is_image_text,
    load_base_model,
    max_seq_length,
    precision,
    resume_checkpoint,
    schedule_steps,
    setup_adapter,
    start_step,
    steps_for,
    training_device,
    warmup_steps,
)
from akka_training.engines.trl.generation import generation_args, uses_vllm, vllm_installed
from akka_training.engines.trl.rewards import StepRewards
from akka_training.engines.trl.steps import StepOutput, StepReporting
from akka_training.engines.trl.tools import ToolCounters, load_tools
from akka_training.rewards.health import HealthWatch, correctness_term, remote_terms
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.scorer import RewardScorer
from akka_training.telemetry import catalog as names
from akka_training.telemetry.tracing import RecordedSpan

# TRL's step logs reported as they are (the clip ratios under the names the telemetry catalog
# routes: the share of completion tokens whose ratio was clipped at each bound).
LOGGED = (
    "loss",
    "learning_rate",
    "grad_norm",
    "kl",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
)

# TRL's tool figures of a step (calls per completion, failed calls per call), under our names.
TRL_TOOL_FIGURES = {
    "tools/call_frequency": "tools/calls_per_completion",
    "tools/failure_frequency": "tools/failure_share",
}


class GrpoFigures(TrainerCallback):
    """GRPO's own figures of a step: TRL's loss, learning rate, gradient norm, KL, entropy and
    clip ratios; the tokens of the step (prompts and completions, from the trainer's count);
    the generation and reward timings; and the reward figures of the step's rollouts.
    (`StepReporting` adds ``timing/update``, the rest of the step.)"""

    def __init__(
        self,
        rewards: StepRewards,
        generation_seconds: dict[int, float],
        generation_wall: dict[int, tuple[float, float]] | None = None,
    ) -> None:
        self.rewards = rewards
        self.generation_seconds = generation_seconds
        self.generation_wall = generation_wall if generation_wall is not None else {}
        self._tokens_seen = 0

    def step_spans(self, step: int, end_s: float) -> list[RecordedSpan]:
        """The step's phases as spans under its step span: generation and reward scoring as
        they were timed, the update from the end of scoring (or generation) to the step's end
        (TRL updates after it scored the step's one generation batch)."""
        attrs = {names.STEP: step}
        spans: list[RecordedSpan] = []
        last = None
        generation = self.generation_wall.pop(step, None)
        if generation is not None:
            spans.append(RecordedSpan(names.PREFIX + "rl.generation", *generation, attrs))
            last = generation[1]
        reward = self.rewards.wall.pop(step, None)
        if reward is not None:
            spans.append(RecordedSpan(names.PREFIX + "rl.reward", *reward, attrs))
            last = reward[1]
        if last is not None:
            spans.append(RecordedSpan(names.PREFIX + "rl.update", last, max(last, end_s), attrs))
        return spans

    def on_train_begin(self, args: Any, state: TrainerState, control: Any, **kwargs: Any) -> None:
        # A resumed run's count starts where its snapshot's did.
        self._tokens_seen = state.num_input_tokens_seen

    def step_output(self, step: int, ended: float) -> StepOutput:
        """The step's phases, its rollouts and what scoring them cost."""
        return StepOutput(
            phases=self.step_spans(step, ended),
            rollouts=self.rewards.rollouts.pop(step, []),
            scoring=self.rewards.scoring.pop(step, nothing_scored()),
        )

    def step_figures(
        self, step: int, logs: dict[str, float], state: TrainerState
    ) -> dict[str, float]:
        out = {key: float(logs[key]) for key in LOGGED if logs.get(key) is not None}
        seen = state.num_input_tokens_seen
        out["tokens"] = float(seen - self._tokens_seen)
        self._tokens_seen = seen
        out["timing/generation"] = self.generation_seconds.pop(step, 0.0)
        out["timing/reward"] = self.rewards.seconds.pop(step, 0.0)
        out |= self.rewards.figures.pop(step, {})
        # TRL's own count of the step's tool calls, when it logged one, covers every call it
        # made (a call to a tool the plan does not declare too).
        for logged, figure in TRL_TOOL_FIGURES.items():
            if logs.get(logged) is not None:
                out[figure] = float(logs[logged])
        return out


class GrpoEngine:
    """GRPO and GSPO on TRL: the `Engine` protocol over this module's `run`."""

    def run(self, job: JobContext) -> Outcome:
        return run(job)


def run(job: JobContext) -> Outcome:
    settings = job.spec.settings
    method = settings.method
    rl = settings.config.rl_hyperparams or RlHyperparams()
    clip = rl.clip or CLIP_BY_METHOD[method]
    device = training_device()
    image_text = is_image_text(settings)
    # How it generates, decided (or refused) before anything is loaded.
    generation = job.spec.generation
    cuda = device.type == "cuda"
    present = generation.engine != "hf" and vllm_installed()
    vllm = uses_vllm(generation, cuda=cuda, vllm_present=present)

    # Model, tools and prompts
    model, processing = load_base_model(settings, device)
    counters = ToolCounters()
    tools = load_tools(settings.config.tools, job.bundles, counters)
    source_rows = read_rows(job.store, settings.dataset.blob)
    rows = rl_rows(source_rows)
    lengths = [_prompt_length(row, processing, tools) for row in rows]
    fit, keep = rl_data_fit(lengths, max_seq_length(settings), rl.max_completion_tokens)
    rows = [row for row, kept in zip(rows, keep, strict=True) if kept]
    steps_per_epoch = len(rows) // rl.prompts_per_step
    if steps_per_epoch < 1:
        raise DataError(
            f"{len(rows)} prompt(s) fit maxSeqLength {fit.max_seq_length} with "
            f"maxCompletionTokens {rl.max_completion_tokens}; a step needs promptsPerStep "
            f"{rl.prompts_per_step}"
        )

    # Reward
    scorer = _scorer(settings.config.reward or Reward(), job)

    # Adapter and resume point
    trainable, peft_config = setup_adapter(job, model, rl.lora)
    resume_from = resume_checkpoint(job)

    # Trainer
    total_steps = start_step(job) + steps_for(
        rl.training.epochs, rl.training.max_steps, steps_per_epoch
    )
    schedule = schedule_steps(resume_from, total_steps)
    args = GRPOConfig(
        **common_args(job, device),
        max_steps=schedule,
        per_device_train_batch_size=rl.generations_per_prompt,
        gradient_accumulation_steps=rl.prompts_per_step,
        steps_per_generation=rl.prompts_per_step,
        num_generations=rl.generations_per_prompt,
        max_completion_length=rl.max_completion_tokens,
        temperature=rl.temperature,
        beta=rl.kl_beta,
        epsilon=clip.low,
        epsilon_high=clip.high,
        learning_rate=rl.optimizer.learning_rate,
        weight_decay=rl.optimizer.weight_decay,
        warmup_steps=warmup_steps(rl.optimizer.warmup_ratio, schedule),
        **_method_args(method),
        **generation_args(
            generation, cuda=cuda, vllm_present=present, max_model_length=max_seq_length(settings)
        ),
    )
    rewards = StepRewards(
        scorer,
        rows,
        source_rows,
        generations_per_prompt=rl.generations_per_prompt,
        max_completion_tokens=rl.max_completion_tokens,
        stop_ids=_stop_ids(processing, model),
        tool_counters=counters if tools else None,
        remote_terms=remote_terms(settings.config.reward),
    )
    trainer = GRPOTrainer(
        model=trainable,
        reward_funcs=rewards,
        args=args,
        train_dataset=Dataset.from_list([_example(row) for row in rows]),
        processing_class=processing,
        peft_config=peft_config,
        tools=tools or None,
    )
    memory = StepMemory(device, vllm_share=generation.vllm_gpu_memory_utilization if vllm else None)
    generation_seconds: dict[int, float] = {}
    generation_wall: dict[int, tuple[float, float]] = {}
    # Generation is timed by wrapping the trainer's private `_generate`: TRL 1.16 has no
    # public seam around it (no callback event; the experimental `rollout_func` replaces
    # generation instead of wrapping it). tests/engines/trl/test_generation_seam.py pins the
    # version and the method, and fails when TRL changes them.
    trainer._generate = _timed_generation(  # type: ignore[method-assign]
        trainer, memory, generation_seconds, generation_wall
    )
    figures = GrpoFigures(rewards, generation_seconds, generation_wall)
    trained = trainer.model
    assert trained is not None  # the trainer holds the model it was given
    # Each step's file is stored and reported off the step's critical path.
    step_files = StepFileWriter[Sequence[Rollout]](
        functools.partial(keep_step_file, job.store, job.reporter, job.spec.run_id)
    )
    pipeline = StepPipeline.for_job(
        job,
        "rl",
        total_steps,
        monitors=HealthWatch(
            job.spec.run_id,
            settings.config.monitors or Monitors(),
            correctness_term(settings.config.monitors, settings.config.reward),
        ),
        rollouts=step_files,
    )
    reporting = StepReporting(
        job,
        figures,
        memory,
        pipeline,
        flop_parameters=flop_parameters(trained),
        peak_flops=peak_flops(device, precision(settings, device)),
    )
    if schedule > total_steps:
        trainer.add_callback(StopAt(total_steps))
    trainer.add_callback(figures)
    trainer.add_callback(reporting)
    modules = adapted_modules(trained)
    if image_text:
        check_language_only(modules)
    if job.telemetry is not None:
        job.telemetry.data_fit(rows_truncated=0, answers_truncated=0, rows_dropped=fit.rows_dropped)
    report = fit.to_report() | {"rowsTruncated": 0, "promptsTruncated": fit.rows_dropped}
    job.reporter.training(
        TrainingReport(total_steps=total_steps, data_fit=report, adapter_modules=modules)
    )

    # Train
    try:
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
        step_files.wait()  # every rollout is kept, however training ended
    finally:
        step_files.close()
        scorer.close()
    step = trainer.state.global_step
    if reporting.stopped:
        return Outcome(step=step, stopped=True, adapter_modules=modules)

    # Save
    adapter_dir = job.artifacts / "adapter"
    trainer.save_model(str(adapter_dir))
    tools_used = bool(counters.calls)
    summary = JobSummary(
        reward=reporting.last.get("reward/mean"),
        tool_calls=dict(counters.calls) if tools_used else None,
        tool_failures=dict(counters.failures) if tools_used else None,
        tool_timeouts=dict(counters.timeouts) if tools_used else None,
    )
    return Outcome(step=step, adapter_dir=adapter_dir, adapter_modules=modules, summary=summary)


def _timed_generation(
    trainer: GRPOTrainer,
    memory: StepMemory,
    seconds: dict[int, float],
    wall: dict[int, tuple[float, float]],
) -> Callable[..., Any]:
    """The trainer's generation, timed (per step, and from its first start to its last end in
    wall time for the step's span) and bracketed for the memory figures."""
    generate = trainer._generate

    @functools.wraps(generate)
    def timed(*args: Any, **kwargs: Any) -> Any:
        step = trainer.state.global_step + 1
        memory.generation_begin()
        started = time.perf_counter()
        wall_started = time.time()
        try:
            return generate(*args, **kwargs)
        finally:
            seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - started
            wall[step] = (wall.get(step, (wall_started, 0.0))[0], time.time())
            memory.generation_end()

    return timed


def _scorer(reward: Reward, job: JobContext) -> RewardScorer:
    if not reward.terms:
        raise RewardError("config.reward.terms is empty: a reinforcement run needs a reward")
    try:
        return RewardScorer.from_reward(reward, bundle_resolver=job.bundles)
    except (RewardSetupError, RewardError) as exc:
        raise RewardError(str(exc)) from exc


def _method_args(method: str) -> dict[str, Any]:
    if method == "gspo":
        return {"importance_sampling_level": "sequence", "loss_type": "grpo"}
    return {"importance_sampling_level": "token"}


def _example(row: RlRow) -> dict[str, Any]:
    return {"prompt": row.prompt, "expected": row.expected, "row_index": row.index}


def _prompt_length(row: RlRow, processing: Any, tools: list[Callable[..., Any]]) -> int:
    return prompt_length(row.prompt, processing, tools=tools or None)


def _stop_ids(processing: Any, model: Any) -> set[int]:
    """Token ids that end a completion by itself (as TRL decides a completion was not cut)."""
    tokenizer = getattr(processing, "tokenizer", processing)
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    eos = getattr(model.generation_config, "eos_token_id", None)
    ids |= set(eos) if isinstance(eos, list) else {eos}
    return {i for i in ids if i is not None}
