"""The resolved plan as verl 0.9.1 Hydra overrides, and verl's own batch-size rules.

`build_overrides` turns a `JobSpec` into the command-line overrides of
``python -m verl.trainer.main_ppo``. Every key was checked against verl 0.9.1's composed
configuration (``--cfg job``); keys absent from it are added with ``+``. The tests compose and
validate the result with verl itself.

The sizes follow one rule: a training step is one optimizer update. So the PPO mini-batch is
the whole step (``ppo_mini_batch_size == train_batch_size == promptsPerStep``), and each GPU
works through its share of the step's completions in micro-batches.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from akka_training.core.plans import Clip, RlHyperparams
from akka_training.core.resolved import JobSpec
from akka_training.engines.verl.paths import VerlPaths
from akka_training.engines.verl.reward_config import CONFIG_KWARG

Attention = Literal["flash_attention_2", "sdpa"]

# The clip range of each method when the plan leaves it out (the resolver fills the same).
METHOD_CLIP: dict[str, Clip] = {
    "grpo": Clip(low=0.2, high=0.28),
    "gspo": Clip(low=3e-4, high=4e-4),
}
# LoRA ranks vLLM accepts go up to 512 (verl rounds a rank up to the next one vLLM allows).
MAX_LORA_RANK = 512
# The most completions one GPU puts through the model at once.
MICRO_BATCH_CAP = 4
# Modules of an image-text model that keep their weights: the adapter covers the language
# backbone only (a PEFT regex, matched against full module names).
FROZEN_TOWERS = (
    r".*(vision|visual|audio|multi_modal_projector|mm_projector|embed_vision|embed_audio).*"
)
# verl imports the reward function from our package (verl.utils.import_utils.load_module).
REWARD_FUNCTION_MODULE = "pkg://akka_training.engines.verl.reward_fn"
REWARD_FUNCTION_NAME = "compute_score"


@dataclass(frozen=True)
class VerlSizes:
    """The batch arithmetic of one run under verl."""

    gpus: int
    prompts_per_step: int  # data.train_batch_size
    ppo_mini_batch_size: int  # prompts per optimizer update: the whole step
    generations: int  # actor_rollout_ref.rollout.n
    rollout_tensor_parallel: int  # GPUs per rollout engine: one, each GPU holds its own
    completions_per_gpu: int  # per optimizer step (0 when they do not divide evenly)
    micro_batch_per_gpu: int
    max_prompt_length: int
    max_response_length: int
    total_steps: int


def plan_sizes(spec: JobSpec) -> VerlSizes:
    """Derive verl's batch sizes and step count from the resolved plan."""
    rl = _rl(spec)
    gpus = spec.settings.execution.gpus
    completions = rl.prompts_per_step * rl.generations_per_prompt
    per_gpu = completions // gpus if completions % gpus == 0 else 0
    return VerlSizes(
        gpus=gpus,
        prompts_per_step=rl.prompts_per_step,
        ppo_mini_batch_size=rl.prompts_per_step,
        generations=rl.generations_per_prompt,
        rollout_tensor_parallel=1,
        completions_per_gpu=per_gpu,
        micro_batch_per_gpu=_largest_divisor_up_to(per_gpu, MICRO_BATCH_CAP) if per_gpu else 1,
        max_prompt_length=_max_seq_length(spec) - rl.max_completion_tokens,
        max_response_length=rl.max_completion_tokens,
        total_steps=total_steps(spec),
    )


def total_steps(spec: JobSpec) -> int:
    """Optimizer steps the run trains to (verl's global step at the end). A continuation counts
    on from the step of the snapshot it starts from."""
    rl = _rl(spec)
    if spec.max_steps is not None:
        planned = spec.max_steps
    elif rl.training.max_steps is not None:
        planned = rl.training.max_steps
    else:
        per_epoch = spec.settings.dataset.rows // rl.prompts_per_step
        planned = max(1, math.floor(rl.training.epochs * per_epoch))
    source = spec.settings.source
    if source is not None and source.kind == "continue":
        return source.step + planned
    return planned


def verl_constraints(spec: JobSpec) -> list[str]:
    """The problems verl itself would raise at start (or fail on later) for this plan, each as a
    sentence that says what to change. Empty when the plan fits verl's rules."""
    rl = _rl(spec)
    sizes = plan_sizes(spec)
    gpus, n = sizes.gpus, sizes.generations
    prompts, mini = sizes.prompts_per_step, sizes.ppo_mini_batch_size
    problems: list[str] = []
    if (prompts * n) % gpus:
        problems.append(
            f"verl splits each step's {prompts} x {n} = {prompts * n} completions evenly over "
            f"the {gpus} GPUs: set config.rlHyperparams.promptsPerStep (or generationsPerPrompt) "
            f"so that promptsPerStep x generationsPerPrompt is divisible by execution.gpus"
        )
    if prompts < mini:
        problems.append(
            f"verl needs at least one PPO mini-batch ({mini} prompts) per step: raise "
            f"config.rlHyperparams.promptsPerStep to {mini} or more"
        )
    # The mini-batch is the whole step here, so this rule repeats the first one unless they differ.
    if mini != prompts and (mini * n) % gpus:
        problems.append(
            f"verl splits each PPO mini-batch of {mini} x {n} completions evenly over the "
            f"{gpus} GPUs: make it divisible by execution.gpus"
        )
    if gpus % sizes.rollout_tensor_parallel:
        problems.append(
            f"execution.gpus ({gpus}) must be a multiple of the GPUs of one rollout engine "
            f"({sizes.rollout_tensor_parallel})"
        )
    if n < 2:
        problems.append(
            "GRPO compares the completions of one prompt with each other: set "
            "config.rlHyperparams.generationsPerPrompt to 2 or more"
        )
    if sizes.max_prompt_length < 1:
        problems.append(
            f"config.maxSeqLength ({_max_seq_length(spec)}) leaves no room for the prompt after "
            f"maxCompletionTokens ({rl.max_completion_tokens}): raise maxSeqLength or lower "
            f"maxCompletionTokens"
        )
    alpha = rl.lora.alpha
    if alpha != int(alpha):
        problems.append(
            f"verl trains with an integer LoRA alpha, and config.rlHyperparams.lora.alpha is "
            f"{alpha:g}: set it to a whole number such as {max(1, round(alpha))}"
        )
    rank = _lora_rank(spec)
    if rank > MAX_LORA_RANK:
        problems.append(
            f"the LoRA rank {rank} is above {MAX_LORA_RANK}, the largest rank verl's rollout "
            f"engine (vLLM) serves: lower config.rlHyperparams.lora.rank"
        )
    if spec.settings.config.tools:
        problems.append(
            "the verl engine does not run tools during rollouts: remove config.tools, or train "
            "on a deployment whose reinforcement engine is trl"
        )
    rows = spec.settings.dataset.rows
    if rows < prompts:
        problems.append(
            f"the dataset has {rows} rows, fewer than one step's {prompts} prompts: lower "
            f"config.rlHyperparams.promptsPerStep or register more rows"
        )
    return problems


def schedule_steps(spec: JobSpec, saved: int | None = None) -> int:
    """The steps the learning-rate schedule spans. A run that restores a training state (a
    resume, a continuation) keeps the schedule that state was trained under (`saved`, from the
    checkpoint's manifest), so that it trains exactly as the uninterrupted run would have; it
    is stretched only for a continuation that trains past the end of its source's schedule."""
    total = total_steps(spec)
    return max(saved, total) if saved else total


def warmup_steps(spec: JobSpec, schedule: int) -> int:
    """The warmup of a schedule of `schedule` steps, as verl counts it (a whole number of
    steps: ``int(lr_warmup_steps_ratio * total_training_steps)``)."""
    return int(_rl(spec).optimizer.warmup_ratio * schedule)


def build_overrides(
    spec: JobSpec,
    paths: VerlPaths,
    *,
    attention: Attention = "sdpa",
    schedule: int | None = None,
) -> list[str]:
    """The overrides for ``python -m verl.trainer.main_ppo``. `attention` is the attention
    kernel of the training model: verl's default, FlashAttention 2, needs the flash-attn package
    in verl's environment; without it the job trains with PyTorch's SDPA and no
    padding removal. `schedule` is the steps the learning-rate schedule spans
    (`schedule_steps`; the run's own steps when None): verl's step count ends the run, and the
    warmup is set in steps of the schedule, so a continuation warms up as its source did."""
    settings = spec.settings
    rl = _rl(spec)
    sizes = plan_sizes(spec)
    schedule = schedule or sizes.total_steps
    clip = rl.clip or METHOD_CLIP[settings.method]
    precision = _DTYPES[settings.config.model.precision or "BF16"]
    source = settings.source
    has_eval = settings.eval_dataset is not None
    resuming = spec.resume is not None or (source is not None and source.kind == "continue")

    values: dict[str, object] = {
        # data
        "data.train_files": str(paths.train_data),
        "data.val_files": str(paths.eval_data if has_eval else paths.train_data),
        "data.train_batch_size": sizes.prompts_per_step,
        "data.max_prompt_length": sizes.max_prompt_length,
        "data.max_response_length": sizes.max_response_length,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": settings.config.seed,
        "data.dataloader_num_workers": 0,
        # algorithm
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        # model and adapter
        "actor_rollout_ref.model.path": settings.base_model.path,
        "actor_rollout_ref.model.lora_rank": _lora_rank(spec),
        # verl types lora_alpha as an integer (HFModelConfig): 32, never 32.0
        "actor_rollout_ref.model.lora_alpha": lora_alpha(spec),
        "actor_rollout_ref.model.target_modules": rl.lora.target_modules,
        "actor_rollout_ref.model.use_remove_padding": attention == "flash_attention_2",
        "+actor_rollout_ref.model.override_config.attn_implementation": attention,
        # policy update
        "actor_rollout_ref.actor.strategy": "fsdp",
        "actor_rollout_ref.actor.ppo_mini_batch_size": sizes.ppo_mini_batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": sizes.micro_batch_per_gpu,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.clip_ratio_low": clip.low,
        "actor_rollout_ref.actor.clip_ratio_high": clip.high,
        "actor_rollout_ref.actor.optim.lr": rl.optimizer.learning_rate,
        "actor_rollout_ref.actor.optim.weight_decay": rl.optimizer.weight_decay,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": rl.optimizer.warmup_ratio,
        # verl computes the warmup from its own total steps when this is 0 or less, which for
        # a continuation are fewer than its schedule's: give it in steps (the constant
        # schedule, verl's default, has nothing else that depends on the total)
        "actor_rollout_ref.actor.optim.lr_warmup_steps": warmup_steps(spec, schedule),
        "actor_rollout_ref.actor.use_kl_loss": rl.kl_beta > 0,
        "actor_rollout_ref.actor.fsdp_config.dtype": precision,
        # the checkpoint holds the adapter's weights, not the base model's: a resume loads the
        # base model from its path and these on top (verl's FSDP checkpoint manager)
        "+actor_rollout_ref.actor.checkpoint.save_lora_only": True,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": sizes.micro_batch_per_gpu,
        # rollout, colocated: every GPU holds a training rank and a rollout engine
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": sizes.generations,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": sizes.rollout_tensor_parallel,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": sizes.micro_batch_per_gpu,
        "actor_rollout_ref.rollout.load_format": "safetensors",
        "actor_rollout_ref.rollout.dtype": precision,
        "actor_rollout_ref.rollout.seed": settings.config.seed,
        # reward: the project's own terms, scored inside verl's reward workers
        "reward.custom_reward_function.path": REWARD_FUNCTION_MODULE,
        "reward.custom_reward_function.name": REWARD_FUNCTION_NAME,
        f"+reward.custom_reward_function.reward_kwargs.{CONFIG_KWARG}": str(paths.reward_config),
        # trainer
        "trainer.project_name": spec.project,
        "trainer.experiment_name": spec.run_id,
        "trainer.nnodes": 1,
        "trainer.n_gpus_per_node": sizes.gpus,
        "trainer.total_epochs": sizes.total_steps,  # an upper bound: total_training_steps ends it
        "trainer.total_training_steps": sizes.total_steps,
        "trainer.logger": ["console", "file"],
        "trainer.default_local_dir": str(paths.checkpoints),
        "trainer.save_freq": settings.execution.save_every,
        # verl would delete its oldest checkpoint before each save, possibly while the job still
        # exports or uploads it: the job removes a checkpoint itself once its snapshot is stored
        "trainer.max_actor_ckpt_to_keep": None,
        "trainer.resume_mode": "auto" if resuming else "disable",
        "trainer.rollout_data_dir": str(paths.rollouts),
        "trainer.val_before_train": False,
        "trainer.test_freq": settings.execution.save_every if has_eval else -1,
        "trainer.log_val_generations": 0,
        # Ray: a private local cluster for this job, never one it might find on the node
        "+ray_kwargs.ray_init.address": "local",
    }
    if settings.method == "gspo":
        values["actor_rollout_ref.actor.policy_loss.loss_mode"] = "gspo"
        values["actor_rollout_ref.actor.loss_agg_mode"] = "seq-mean-token-mean"
    if rl.kl_beta > 0:
        values["actor_rollout_ref.actor.kl_loss_coef"] = rl.kl_beta
        values["actor_rollout_ref.actor.kl_loss_type"] = "low_var_kl"
    if source is not None and source.kind in ("warm-start", "branch"):
        values["actor_rollout_ref.model.lora_adapter_path"] = str(paths.source_adapter)
    if settings.base_model.modality != "text":
        values["actor_rollout_ref.model.exclude_modules"] = FROZEN_TOWERS
    return [f"{key}={render_value(value)}" for key, value in values.items()]


def runtime_env_overrides(variables: Mapping[str, str]) -> list[str]:
    """Environment variables for every process of verl's Ray cluster: ``main_ppo`` merges
    ``ray_kwargs.ray_init.runtime_env`` into the runtime environment it starts Ray with."""
    return [
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{name}={render_value(value)}"
        for name, value in variables.items()
    ]


def file_logger_env(paths: VerlPaths) -> dict[str, str]:
    """Environment for verl's file logger: a fresh metrics file for this attempt."""
    return {"VERL_FILE_LOGGER_PATH": str(paths.metrics_file)}


# --- helpers ----------------------------------------------------------------------------------

_DTYPES = {"BF16": "bfloat16", "FP16": "float16", "FP32": "float32"}
# Values Hydra's override grammar reads literally without quotes.
_PLAIN = re.compile(r"^[A-Za-z0-9_./\-]+$")


def _rl(spec: JobSpec) -> RlHyperparams:
    rl = spec.settings.config.rl_hyperparams
    if spec.settings.method not in METHOD_CLIP or rl is None:
        raise ValueError(f"verl trains grpo and gspo runs only, not {spec.settings.method}")
    return rl


def _lora_rank(spec: JobSpec) -> int:
    """The adapter's rank: a warm start or branch keeps the rank of the adapter it starts from."""
    source = spec.settings.source
    if source is not None and source.kind in ("warm-start", "branch") and source.lora_rank:
        return source.lora_rank
    return _rl(spec).lora.rank


def lora_alpha(spec: JobSpec) -> int:
    """The plan's LoRA alpha as the integer verl takes (`verl_constraints` refuses a fraction)."""
    return int(_rl(spec).lora.alpha)


def _max_seq_length(spec: JobSpec) -> int:
    configured = spec.settings.config.max_seq_length
    if configured is not None:
        return configured
    return min(2048, spec.settings.base_model.context_length)


def _largest_divisor_up_to(value: int, cap: int) -> int:
    return max(d for d in range(1, min(value, cap) + 1) if value % d == 0)


def render_value(value: object) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in ("true", "false", "null"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Iterable):
        return "[" + ",".join(render_value(item) for item in value) + "]"
    raise TypeError(f"cannot render {value!r} as a Hydra override")
