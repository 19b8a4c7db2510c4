"""Supervised fine-tuning through TRL's SFTTrainer with a LoRA adapter.

One flow: set up the model and its processing class, the data (with its data fit), the adapter
(fresh, or the source run's) and the resume point; report `training`; train, each step reported
by `StepReporting` through the job's step pipeline; save the final adapter. The loss counts the answer only: the assistant turns
of chat rows (``assistant_only_loss``, through the chat template's generation markers) and the
completion of prompt/completion rows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from datasets import Dataset
from transformers import TrainerCallback, TrainerState
from trl.trainer.sft_config import SFTConfig
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling, SFTTrainer

from akka_training.core.plans import SftHyperparams
from akka_training.core.reports import JobSummary, TrainingReport
from akka_training.engines.adapters import adapted_modules, check_language_only
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.data import read_rows, sft_examples
from akka_training.engines.datafit import DataFit, PaddingMeter, sft_data_fit
from akka_training.engines.failures import DataError
from akka_training.engines.flops import flop_parameters, peak_flops
from akka_training.engines.memory import StepMemory
from akka_training.engines.step_pipeline import StepPipeline
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
from akka_training.engines.trl.sft_speed import (
    SftSpeed,
    activation_bytes,
    flash_attention_installed,
    liger_installed,
    sft_speed,
    weight_bytes,
)
from akka_training.engines.trl.steps import StepOutput, StepReporting

# Figures of TRL's step logs reported as they are.
LOGGED = ("loss", "grad_norm", "learning_rate")


class SftFigures:
    """SFT's own figures of a step: the Trainer's loss, gradient norm and learning rate (or
    the `logged` figures a method names, dpo's preference figures too), and the tokens and
    padding share of the batches the step consumed."""

    def __init__(
        self,
        padding: PaddingMeter,
        batches_in_step: Callable[[], int],
        logged: tuple[str, ...] = LOGGED,
    ) -> None:
        self.padding = padding
        self.batches_in_step = batches_in_step
        self.logged = logged

    def step_figures(
        self, step: int, logs: dict[str, float], state: TrainerState
    ) -> dict[str, float]:
        out = {key: float(logs[key]) for key in self.logged if logs.get(key) is not None}
        tokens, share = self.padding.take(self.batches_in_step())
        out["tokens"] = float(tokens)
        if share is not None:
            out["padding_share"] = share
        return out

    def step_output(self, step: int, ended: float) -> StepOutput:
        return StepOutput()  # no phases, no rollouts


class SftEngine:
    """Supervised fine-tuning on TRL: the `Engine` protocol over this module's `run`."""

    def run(self, job: JobContext) -> Outcome:
        return run(job)


def run(job: JobContext) -> Outcome:
    settings = job.spec.settings
    hp = settings.config.hyperparams or SftHyperparams()
    device = training_device()
    image_text = is_image_text(settings)

    # Model, the fast path on a GPU, and data
    max_length = max_seq_length(settings)
    speed = _speed(settings, hp, device, max_length)
    model, processing = load_base_model(settings, device, speed.attn_implementation)
    examples = sft_examples(read_rows(job.store, settings.dataset.blob), image_text=image_text)
    fit = sft_data_fit(examples, processing, max_length)
    _check_fit(fit)
    eval_examples = None
    if settings.eval_dataset is not None:
        eval_rows = read_rows(job.store, settings.eval_dataset.blob)
        eval_examples = sft_examples(eval_rows, image_text=image_text)

    # Adapter and resume point
    trainable, peft_config = setup_adapter(job, model, hp.lora)
    resume_from = resume_checkpoint(job)

    # Trainer
    training = hp.training
    steps_per_epoch = math.ceil(
        math.ceil((fit.rows - fit.rows_dropped) / training.batch_size)
        / training.gradient_accumulation
    )
    total_steps = start_step(job) + steps_for(training.epochs, training.max_steps, steps_per_epoch)
    schedule = schedule_steps(resume_from, total_steps)
    args = SFTConfig(
        **common_args(job, device),
        max_steps=schedule,
        per_device_train_batch_size=training.batch_size,
        per_device_eval_batch_size=training.batch_size,
        gradient_accumulation_steps=training.gradient_accumulation,
        learning_rate=hp.optimizer.learning_rate,
        weight_decay=hp.optimizer.weight_decay,
        warmup_steps=warmup_steps(hp.optimizer.warmup_ratio, schedule),
        max_length=max_length,
        assistant_only_loss="messages" in examples[0],
        eval_strategy="steps" if eval_examples else "no",
        eval_steps=training.validation_frequency_steps if eval_examples else None,
        use_liger_kernel=speed.liger,
        **_checkpointing(speed),
    )
    trainer = SFTTrainer(
        model=trainable,
        args=args,
        train_dataset=Dataset.from_list(examples),
        eval_dataset=Dataset.from_list(eval_examples) if eval_examples else None,
        processing_class=processing,
        peft_config=peft_config,
    )
    if schedule > total_steps:
        trainer.add_callback(StopAt(total_steps))
    if speed.padding_free:
        # TRL prepared (cut and dropped) the rows as for padded batches; only the batches change.
        collator = trainer.data_collator
        assert isinstance(collator, DataCollatorForLanguageModeling)  # TRL's, for text rows
        trainer.data_collator = dataclasses.replace(
            collator, padding_free=True, pad_to_multiple_of=None
        )
    padding = PaddingMeter(trainer.data_collator)
    trainer.data_collator = padding
    trainer.add_callback(TrainingCollatorOnly(trainer))
    trained = trainer.model
    assert trained is not None  # the trainer holds the model it was given
    reporting = StepReporting(
        job,
        SftFigures(padding, lambda: trainer.current_gradient_accumulation_steps),
        StepMemory(device),
        StepPipeline.for_job(job, "sft", total_steps),
        flop_parameters=flop_parameters(trained),
        peak_flops=peak_flops(device, precision(settings, device)),
    )
    trainer.add_callback(reporting)
    modules = adapted_modules(trained)
    if image_text:
        check_language_only(modules)
    if job.telemetry is not None:
        job.telemetry.data_fit(
            rows_truncated=fit.rows_truncated,
            answers_truncated=fit.answers_truncated,
            rows_dropped=fit.rows_dropped,
        )
    job.reporter.training(
        TrainingReport(total_steps=total_steps, data_fit=fit.to_report(), adapter_modules=modules)
    )

    # Train
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    step = trainer.state.global_step
    if reporting.stopped:
        return Outcome(step=step, stopped=True, adapter_modules=modules)

    # Save
    adapter_dir = job.artifacts / "adapter"
    trainer.save_model(str(adapter_dir))
    summary = JobSummary(loss=reporting.last.get("loss"))
    return Outcome(step=step, adapter_dir=adapter_dir, adapter_modules=modules, summary=summary)


class TrainingCollatorOnly(TrainerCallback):
    """Once the training data loader exists (it holds the padding meter), give the trainer its
    own collator back, so evaluation batches do not count as training batches."""

    def __init__(self, trainer: SFTTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if isinstance(self.trainer.data_collator, PaddingMeter):
            self.trainer.data_collator = self.trainer.data_collator.collator


def _speed(settings: Any, hp: SftHyperparams, device: Any, max_length: int) -> SftSpeed:
    """The run's fast path (`sft_speed`), from the device, the installed kernels and the model's
    shape."""
    cuda = device.type == "cuda"
    weights = activations = total = 0
    if cuda:
        import torch
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(settings.base_model.path).get_text_config()
        hidden = int(getattr(config, "hidden_size", 0) or 0)
        layers = int(getattr(config, "num_hidden_layers", 0) or 0)
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        weights = weight_bytes(hidden, layers, vocab)
        activations = activation_bytes(hp.training.batch_size, max_length, hidden, layers)
        total = torch.cuda.get_device_properties(device).total_memory
    return sft_speed(
        hp.training.kernels,
        cuda=cuda,
        image_text=is_image_text(settings),
        flash_attention=cuda and flash_attention_installed(),
        liger=liger_installed(),
        weight_bytes=weights,
        activations=activations,
        device_bytes=total,
    )


def _checkpointing(speed: SftSpeed) -> dict[str, Any]:
    if speed.gradient_checkpointing is None:
        return {}
    return {"gradient_checkpointing": speed.gradient_checkpointing}


def _check_fit(fit: DataFit) -> None:
    if fit.rows_dropped == fit.rows:
        raise DataError(
            f"every row of the dataset was dropped: none keeps an answer token within "
            f"maxSeqLength {fit.max_seq_length}"
        )
