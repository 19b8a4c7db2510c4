"""The resolved plan as verl overrides, and verl's batch rules (verl itself composes and
validates these overrides in test_verl_config.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.core.plans import Tool
from akka_training.engines.verl.overrides import (
    FROZEN_TOWERS,
    build_overrides,
    plan_sizes,
    render_value,
    schedule_steps,
    total_steps,
    verl_constraints,
)
from akka_training.engines.verl.paths import VerlPaths
from tests.engines.verl.conftest import make_spec

PATHS = VerlPaths(Path("/jobs/run-1/verl"), attempt=1)


def as_dict(overrides: list[str]) -> dict[str, str]:
    pairs = [o.split("=", 1) for o in overrides]
    assert len({k for k, _ in pairs}) == len(pairs), "an override repeats a key"
    return dict(pairs)


def test_grpo_plan_becomes_verl_settings() -> None:
    spec = make_spec(
        gpus=2, rl={"promptsPerStep": 8, "generationsPerPrompt": 4, "temperature": 0.7}
    )
    o = as_dict(build_overrides(spec, PATHS))
    assert o["algorithm.adv_estimator"] == "grpo"
    assert o["data.train_batch_size"] == "8"
    assert o["actor_rollout_ref.rollout.n"] == "4"
    assert o["trainer.n_gpus_per_node"] == "2"
    assert o["trainer.nnodes"] == "1"
    assert o["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    assert o["actor_rollout_ref.rollout.name"] == "vllm"
    assert o["actor_rollout_ref.rollout.temperature"] == "0.7"
    # one optimizer update per step: the PPO mini-batch is the whole step
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == "8"
    # 8 x 4 completions over 2 GPUs: 16 each, in micro-batches of 4
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    assert o["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == "4"
    assert o["data.max_prompt_length"] == "896"  # maxSeqLength 1024 - maxCompletionTokens 128
    assert o["data.max_response_length"] == "128"
    assert o["actor_rollout_ref.model.lora_rank"] == "8"
    assert o["actor_rollout_ref.model.lora_alpha"] == "16"
    # the checkpoint holds the adapter's weights only, and verl deletes none of its own
    assert o["+actor_rollout_ref.actor.checkpoint.save_lora_only"] == "true"
    assert o["trainer.max_actor_ckpt_to_keep"] == "null"
    assert o["actor_rollout_ref.model.target_modules"] == "all-linear"
    assert o["actor_rollout_ref.rollout.load_format"] == "safetensors"
    assert o["actor_rollout_ref.actor.optim.lr"] == "1e-05"
    assert o["actor_rollout_ref.actor.clip_ratio_low"] == "0.2"
    assert o["actor_rollout_ref.actor.clip_ratio_high"] == "0.28"
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert "actor_rollout_ref.actor.kl_loss_coef" not in o
    assert "actor_rollout_ref.actor.policy_loss.loss_mode" not in o
    assert o["trainer.total_training_steps"] == "8"  # 64 rows / 8 prompts, one epoch
    assert o["trainer.logger"] == "[console,file]"
    assert o["trainer.default_local_dir"] == "/jobs/run-1/verl/checkpoints"
    assert o["trainer.rollout_data_dir"] == "/jobs/run-1/verl/rollouts/attempt-1"
    assert o["trainer.save_freq"] == "2"
    assert o["trainer.resume_mode"] == "disable"
    assert o["+ray_kwargs.ray_init.address"] == "local"
    assert o["reward.custom_reward_function.path"] == "'pkg://akka_training.engines.verl.reward_fn'"
    assert o["reward.custom_reward_function.name"] == "compute_score"
    assert (
        o["+reward.custom_reward_function.reward_kwargs.akka_reward_config"]
        == "/jobs/run-1/verl/reward/config.json"
    )
    # no evaluation dataset: verl still loads one, so it gets the training file and never runs it
    assert o["data.val_files"] == o["data.train_files"] == "/jobs/run-1/verl/data/train.parquet"
    assert o["trainer.test_freq"] == "-1"
    assert o["trainer.val_before_train"] == "false"


def test_gspo_uses_sequence_level_loss_and_its_clip_range() -> None:
    o = as_dict(build_overrides(make_spec(method="gspo"), PATHS))
    assert o["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-mean"
    assert o["actor_rollout_ref.actor.clip_ratio_low"] == "0.0003"
    assert o["actor_rollout_ref.actor.clip_ratio_high"] == "0.0004"
    planned = make_spec(method="gspo", rl={"clip": {"low": 0.001, "high": 0.002}})
    o = as_dict(build_overrides(planned, PATHS))
    assert (
        o["actor_rollout_ref.actor.clip_ratio_low"],
        o["actor_rollout_ref.actor.clip_ratio_high"],
    ) == (
        "0.001",
        "0.002",
    )


def test_kl_beta_turns_on_verl_kl_loss() -> None:
    o = as_dict(build_overrides(make_spec(rl={"klBeta": 0.04}), PATHS))
    assert o["actor_rollout_ref.actor.use_kl_loss"] == "true"
    assert o["actor_rollout_ref.actor.kl_loss_coef"] == "0.04"
    assert o["algorithm.use_kl_in_reward"] == "false"


def test_warm_start_loads_the_adapter_with_its_rank() -> None:
    source = {
        "kind": "warm-start",
        "run": "r0",
        "snapshot": None,
        "step": 10,
        "weights": "w",
        "loraRank": 32,
    }
    o = as_dict(build_overrides(make_spec(source=source), PATHS))
    assert o["actor_rollout_ref.model.lora_adapter_path"] == "/jobs/run-1/verl/source/adapter"
    assert o["actor_rollout_ref.model.lora_rank"] == "32"
    assert o["trainer.resume_mode"] == "disable"


def test_resume_and_continue_restart_from_checkpoints() -> None:
    o = as_dict(build_overrides(make_spec(resume=True), PATHS))
    assert o["trainer.resume_mode"] == "auto"
    assert "actor_rollout_ref.model.lora_adapter_path" not in o
    source = {
        "kind": "continue",
        "run": "r0",
        "snapshot": "step-6",
        "step": 6,
        "weights": "w",
        "trainingState": "t",
    }
    spec = make_spec(source=source, rl={"training": {"maxSteps": 4}})
    o = as_dict(build_overrides(spec, PATHS))
    assert o["trainer.resume_mode"] == "auto"
    assert o["trainer.total_training_steps"] == "10"  # 4 more steps after step 6
    assert total_steps(spec) == 10


def test_image_text_model_keeps_its_towers_frozen() -> None:
    o = as_dict(build_overrides(make_spec(modality="image-text"), PATHS))
    assert o["actor_rollout_ref.model.exclude_modules"] == render_value(FROZEN_TOWERS)
    assert "actor_rollout_ref.model.exclude_modules" not in as_dict(
        build_overrides(make_spec(), PATHS)
    )


def test_evaluation_dataset_is_validated_every_save() -> None:
    o = as_dict(build_overrides(make_spec(eval_dataset=True), PATHS))
    assert o["data.val_files"] == "/jobs/run-1/verl/data/eval.parquet"
    assert o["trainer.test_freq"] == "2"


def test_attention_choice() -> None:
    o = as_dict(build_overrides(make_spec(), PATHS))
    assert o["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert o["actor_rollout_ref.model.use_remove_padding"] == "false"
    o = as_dict(build_overrides(make_spec(), PATHS, attention="flash_attention_2"))
    assert o["+actor_rollout_ref.model.override_config.attn_implementation"] == "flash_attention_2"
    assert o["actor_rollout_ref.model.use_remove_padding"] == "true"


def test_values_are_quoted_for_hydra() -> None:
    paths = VerlPaths(Path("/jobs/it's here/verl"), attempt=3)
    o = as_dict(build_overrides(make_spec(), paths))
    assert o["trainer.default_local_dir"] == "'/jobs/it\\'s here/verl/checkpoints'"
    assert render_value(["q_proj", "v_proj"]) == "[q_proj,v_proj]"
    assert render_value("true") == "'true'"
    assert render_value(None) == "null"


def test_plan_within_verl_rules_has_no_problems() -> None:
    assert (
        verl_constraints(make_spec(gpus=4, rl={"promptsPerStep": 8, "generationsPerPrompt": 2}))
        == []
    )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"gpus": 3}, "divisible by execution.gpus"),
        ({"rl": {"generationsPerPrompt": 1}}, "generationsPerPrompt to 2 or more"),
        (
            {"max_seq_length": 128, "rl": {"maxCompletionTokens": 128}},
            "leaves no room for the prompt",
        ),
        ({"rows": 4}, "the dataset has 4 rows"),
        ({"rl": {"lora": {"rank": 1024}}}, "above 512"),
    ],
)
def test_plan_outside_verl_rules_is_explained(kwargs: dict[str, Any], fragment: str) -> None:
    problems = verl_constraints(make_spec(**kwargs))
    assert len(problems) == 1
    assert fragment in problems[0]


def test_tools_are_refused() -> None:
    spec = make_spec()
    spec.settings.config.tools = [Tool(name="calc", bundle="maths/tools:v1", function="calc:run")]
    assert verl_constraints(spec) == [
        "the verl engine does not run tools during rollouts: remove config.tools, or train on a "
        "deployment whose reinforcement engine is trl"
    ]


def test_sizes_of_an_uneven_split() -> None:
    sizes = plan_sizes(make_spec(gpus=3))
    assert sizes.completions_per_gpu == 0  # 32 completions do not split over 3 GPUs
    assert (
        plan_sizes(
            make_spec(gpus=8, rl={"promptsPerStep": 16, "generationsPerPrompt": 6})
        ).micro_batch_per_gpu
        == 4
    )


def test_sft_is_not_verl_work() -> None:
    spec = make_spec()
    spec.settings.method = "sft"
    with pytest.raises(ValueError, match="grpo and gspo"):
        build_overrides(spec, PATHS)


def test_a_lora_alpha_reaches_verl_as_the_whole_number_it_types() -> None:
    spec = make_spec(rl={"lora": {"alpha": 32}})  # the plan holds 32.0
    overrides = dict(o.split("=", 1) for o in build_overrides(spec, VerlPaths(Path("/r"), 1)))
    assert overrides["actor_rollout_ref.model.lora_alpha"] == "32"
    assert verl_constraints(spec) == []


def test_a_fractional_lora_alpha_is_refused_with_what_to_set() -> None:
    assert verl_constraints(make_spec(rl={"lora": {"alpha": 0.5}})) == [
        "verl trains with an integer LoRA alpha, and config.rlHyperparams.lora.alpha is 0.5: "
        "set it to a whole number such as 1"
    ]


CONTINUE_AT_25 = {
    "kind": "continue",
    "run": "r0",
    "snapshot": "step-25",
    "step": 25,
    "weights": "w",
    "trainingState": "t",
}


def test_a_continuation_trains_its_steps_under_its_sources_warmup() -> None:
    # The source planned 50 steps with a 10% warmup (5 steps); `runs continue --steps 5` from
    # its step 25 ends at verl's step 30, and warms up over the source's 5 steps, not 10% of 30.
    source_run = make_spec(rl={"training": {"maxSteps": 50}, "optimizer": {"warmupRatio": 0.1}})
    assert (
        as_dict(build_overrides(source_run, PATHS))["actor_rollout_ref.actor.optim.lr_warmup_steps"]
        == "5"
    )
    spec = make_spec(
        source=CONTINUE_AT_25,
        rl={"training": {"maxSteps": 5}, "optimizer": {"warmupRatio": 0.1}},
    )
    o = as_dict(build_overrides(spec, PATHS, schedule=schedule_steps(spec, saved=50)))
    assert o["trainer.total_training_steps"] == "30"
    assert o["actor_rollout_ref.actor.optim.lr_warmup_steps"] == "5"
    # past the end of its source's schedule the schedule is the continuation's own
    assert (
        schedule_steps(make_spec(source=CONTINUE_AT_25, rl={"training": {"maxSteps": 40}}), 50)
        == 65
    )
    # a snapshot saved before its manifest recorded the schedule: the run's own steps
    assert schedule_steps(spec, saved=None) == 30
