"""Preference fine-tuning (DPO) through TRL's DPOTrainer with a LoRA adapter.

One flow, as for SFT: set up the model and its tokenizer, the pairs (with their data fit), the
adapter (fresh, or the source run's) and the resume point; report `training`; train, each step
reported by `StepReporting` through the job's step pipeline; save the final adapter.

The reference policy is the policy the run starts from, and it takes no second copy of the
model. A run from the base model trains a fresh adapter, and TRL computes the reference with
the adapter disabled (the base model). A run from a stored adapter (a warm start from an SFT
run, a branch from a snapshot) loads it trainable under PEFT's ``default`` name, and TRL loads
a frozen copy of it under the name ``ref`` beside it on the same base: the reference is that
adapter, not the base model. Either way the first step's rewards are exactly 0.

A continuation (`runs continue`) starts its policy from a snapshot's adapter, which TRL would
copy as the reference; its settings record the reference of the run it continues
(`Settings.reference`), and that is put back before it trains: the ``ref`` adapter is loaded
with the recorded adapter's weights, or dropped when the reference is the base model. Its
figures then go on as the uninterrupted run's would have.

The pairs are tokenised by TRL (its chat template for messages); a pair whose prompt alone fills
``maxSeqLength`` is dropped by TRL, a longer prompt then keeps its last
``preference.maxPromptLength`` tokens (the end, next to the answers), and the collator cuts
prompt + answer at ``maxSeqLength``. `datafit.pair_fit` counts each from TRL's own token ids.
"""

from __future__ import annotations

import math
from typing import Any

from datasets import Dataset
from peft.utils import load_peft_weights, set_peft_model_state_dict
from trl.trainer.dpo_config import DPOConfig
from trl.trainer.dpo_trainer import DPOTrainer

from akka_training.core.plans import Preference, SftHyperparams
from akka_training.core.reports import JobSummary, TrainingReport
from akka_training.engines.adapters import adapted_modules
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.data import preference_examples, read_rows
from akka_training.engines.datafit import PaddingMeter, PairFit, pair_fit
from akka_training.engines.failures import DataError, SourceUnavailable
from akka_training.engines.flops import flop_parameters, peak_flops
from akka_training.engines.memory import StepMemory
from akka_training.engines.snapshots import download_adapter
from akka_training.engines.step_pipeline import StepPipeline
from akka_training.engines.trl.common import (
    StopAt,
    common_args,
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
from akka_training.engines.trl.sft import SftFigures, TrainingCollatorOnly
from akka_training.engines.trl.steps import StepReporting

# The preference figures of TRL's step logs, reported as they are: the implicit rewards
# (beta times the policy's log-probability ratio over the reference's) of the chosen and the
# rejected answers, their margin, the share of pairs whose chosen reward is the higher, and the
# policy's summed log-probabilities of each answer. Each is the mean over the step's pairs.
PREFERENCE_FIGURES = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
)
# The name TRL gives the frozen copy of a stored adapter it takes as the reference.
REFERENCE_ADAPTER = "ref"
LOGGED = ("loss", "grad_norm", "learning_rate", *PREFERENCE_FIGURES)


class DpoEngine:
    """Preference fine-tuning on TRL: the `Engine` protocol over this module's `run`."""

    def run(self, job: JobContext) -> Outcome:
        return run(job)


def run(job: JobContext) -> Outcome:
    settings = job.spec.settings
    hp = settings.config.hyperparams or SftHyperparams()
    preference = hp.preference or Preference()
    device = training_device()

    # Model and data
    model, processing = load_base_model(settings, device)
    max_length = max_seq_length(settings)
    max_prompt = preference.max_prompt_length or max_length // 2
    examples = preference_examples(read_rows(job.store, settings.dataset.blob))
    eval_examples = None
    if settings.eval_dataset is not None:
        eval_examples = preference_examples(read_rows(job.store, settings.eval_dataset.blob))

    # Adapter (and with it the reference policy) and resume point
    trainable, peft_config = setup_adapter(job, model, hp.lora)
    resume_from = resume_checkpoint(job)

    # Trainer. The steps are known once TRL has tokenised the pairs (and dropped some), so the
    # schedule is set on the arguments after the trainer is built, before it trains.
    training = hp.training
    args = DPOConfig(
        **common_args(job, device),
        max_steps=1,
        per_device_train_batch_size=training.batch_size,
        per_device_eval_batch_size=training.batch_size,
        gradient_accumulation_steps=training.gradient_accumulation,
        learning_rate=hp.optimizer.learning_rate,
        weight_decay=hp.optimizer.weight_decay,
        max_length=max_length,
        beta=preference.beta,
        loss_type=[preference.loss_type],
        label_smoothing=preference.label_smoothing,
        eval_strategy="steps" if eval_examples else "no",
        eval_steps=training.validation_frequency_steps if eval_examples else None,
    )
    trainer = DPOTrainer(
        model=trainable,
        args=args,
        train_dataset=Dataset.from_list(examples),
        eval_dataset=Dataset.from_list(eval_examples) if eval_examples else None,
        processing_class=processing,
        peft_config=peft_config,
    )
    _keep_reference(job, trainer.model)
    prepared = trainer.train_dataset
    assert isinstance(prepared, Dataset)
    fit = pair_fit(len(examples), _lengths(prepared), max_length, max_prompt)
    _check_fit(fit)
    trainer.train_dataset = _cut_prompts(prepared, max_prompt)
    if isinstance(trainer.eval_dataset, Dataset):
        trainer.eval_dataset = _cut_prompts(trainer.eval_dataset, max_prompt)
    kept = fit.fit.rows - fit.fit.rows_dropped
    steps_per_epoch = math.ceil(
        math.ceil(kept / training.batch_size) / training.gradient_accumulation
    )
    total_steps = start_step(job) + steps_for(training.epochs, training.max_steps, steps_per_epoch)
    schedule = schedule_steps(resume_from, total_steps)
    trainer.args.max_steps = schedule
    trainer.args.warmup_steps = warmup_steps(hp.optimizer.warmup_ratio, schedule)
    if schedule > total_steps:
        trainer.add_callback(StopAt(total_steps))
    padding = PaddingMeter(trainer.data_collator)
    trainer.data_collator = padding
    trainer.add_callback(TrainingCollatorOnly(trainer))  # type: ignore[arg-type]
    trained = trainer.model
    assert trained is not None  # the trainer holds the model it was given
    reporting = StepReporting(
        job,
        SftFigures(padding, lambda: trainer.current_gradient_accumulation_steps, LOGGED),
        StepMemory(device),
        StepPipeline.for_job(job, "sft", total_steps),
        flop_parameters=flop_parameters(trained),
        peak_flops=peak_flops(device, precision(settings, device)),
    )
    trainer.add_callback(reporting)
    modules = adapted_modules(trained)
    if job.telemetry is not None:
        job.telemetry.data_fit(
            rows_truncated=fit.fit.rows_truncated,
            answers_truncated=fit.fit.answers_truncated,
            rows_dropped=fit.fit.rows_dropped,
        )
    job.reporter.training(
        TrainingReport(total_steps=total_steps, data_fit=fit.to_report(), adapter_modules=modules)
    )

    # Train
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    step = trainer.state.global_step
    if reporting.stopped:
        return Outcome(step=step, stopped=True, adapter_modules=modules)

    # Save (the trained adapter; a reference adapter is saved beside it in a subdirectory,
    # which is not uploaded)
    adapter_dir = job.artifacts / "adapter"
    trainer.save_model(str(adapter_dir))
    summary = JobSummary(loss=reporting.last.get("loss"))
    return Outcome(step=step, adapter_dir=adapter_dir, adapter_modules=modules, summary=summary)


def _keep_reference(job: JobContext, model: Any) -> None:
    """A continuation's reference is the one its settings record (the run it continues was
    measured against it), not the snapshot's adapter TRL copied as ``ref``."""
    settings = job.spec.settings
    source = settings.source
    if source is None or source.kind != "continue":
        return  # TRL's reference is already the adapter the run starts from, or the base model
    reference = settings.reference
    if reference is None:
        raise SourceUnavailable(
            f"the continuation of run {source.run} records no reference policy; continue it "
            "again (the service records the reference of the run it continues)"
        )
    if reference.kind == "base-model" or reference.weights is None:
        model.delete_adapter(REFERENCE_ADAPTER)  # the adapter disabled: the base model
        return
    directory = download_adapter(job.store, reference.weights, job.workdir / "reference-adapter")
    weights = load_peft_weights(str(directory), device=str(model.device))
    loaded = set_peft_model_state_dict(model, weights, adapter_name=REFERENCE_ADAPTER)
    unexpected: list[str] = list(getattr(loaded, "unexpected_keys", []))
    if unexpected:
        raise SourceUnavailable(
            f"the reference adapter at {reference.weights} does not fit the snapshot's adapter "
            f"(it holds {len(unexpected)} weights the snapshot's has not)"
        )


def _lengths(prepared: Dataset) -> list[tuple[int, int, int]]:
    columns = (prepared["prompt_ids"], prepared["chosen_ids"], prepared["rejected_ids"])
    return [(len(p), len(c), len(r)) for p, c, r in zip(*columns, strict=True)]


def _cut_prompts(prepared: Dataset, keep: int) -> Dataset:
    """Each prompt's last `keep` tokens: the end of a long prompt, next to the answers."""
    return prepared.map(_cut_prompt, fn_kwargs={"keep": keep})


def _cut_prompt(example: dict[str, Any], keep: int) -> dict[str, Any]:
    return {"prompt_ids": example["prompt_ids"][-keep:]}


def _check_fit(fit: PairFit) -> None:
    if fit.fit.rows_dropped == fit.fit.rows:
        raise DataError(
            f"every pair of the dataset was dropped: each prompt alone fills maxSeqLength "
            f"{fit.fit.max_seq_length}; raise config.maxSeqLength or shorten the prompts"
        )
