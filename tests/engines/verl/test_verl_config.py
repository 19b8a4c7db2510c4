"""verl 0.9.1 itself composes and validates the overrides we generate (in verl's environment;
skipped, saying so, when scripts/setup-verl-env.sh has not built it).

`python -m verl.trainer.main_ppo --cfg job` composes the configuration exactly as a training run
does and prints it (Hydra refuses unknown keys); `preflight` then runs the checks main_ppo runs
before it starts Ray (verl's validate_config and the loading of our reward function)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from akka_training.engines.verl.overrides import (
    build_overrides,
    runtime_env_overrides,
    verl_constraints,
)
from akka_training.engines.verl.paths import VerlPaths
from tests.engines.verl.conftest import VerlEnv, make_spec

# Runs verl's own environment (.venv-verl).
pytestmark = pytest.mark.slow


def test_main_ppo_composes_our_overrides(verl_env: VerlEnv, tmp_path: Path) -> None:
    source = {
        "kind": "warm-start",
        "run": "r0",
        "snapshot": None,
        "step": 5,
        "weights": "w",
        "loraRank": 16,
    }
    spec = make_spec(
        method="gspo",
        gpus=2,
        rl={"klBeta": 0.02},
        source=source,
        eval_dataset=True,
        modality="image-text",
    )
    paths = VerlPaths(tmp_path / "run dir", 1)
    ray_env = runtime_env_overrides({"AKKA_VERL_SAVE_REQUEST": str(paths.root / "save-request")})
    done = verl_env.run(
        ["-m", "verl.trainer.main_ppo", "--cfg", "job", *build_overrides(spec, paths), *ray_env]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = yaml.safe_load(done.stdout)
    actor = config["actor_rollout_ref"]["actor"]
    model = config["actor_rollout_ref"]["model"]
    rollout = config["actor_rollout_ref"]["rollout"]
    assert config["algorithm"]["adv_estimator"] == "grpo"
    assert actor["policy_loss"]["loss_mode"] == "gspo"
    assert actor["loss_agg_mode"] == "seq-mean-token-mean"
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (3e-4, 4e-4)
    assert (actor["use_kl_loss"], actor["kl_loss_coef"]) == (True, 0.02)
    assert (model["lora_rank"], model["lora_adapter_path"]) == (16, str(paths.source_adapter))
    assert model["override_config"] == {"attn_implementation": "sdpa"}
    assert model["exclude_modules"].startswith(".*(vision|visual|audio")
    assert (rollout["n"], rollout["tensor_model_parallel_size"], rollout["name"]) == (4, 1, "vllm")
    assert config["trainer"]["logger"] == ["console", "file"]
    assert config["trainer"]["default_local_dir"] == str(paths.checkpoints)
    assert config["ray_kwargs"]["ray_init"]["address"] == "local"
    assert config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"] == {
        "AKKA_VERL_SAVE_REQUEST": str(paths.root / "save-request")
    }
    assert config["reward"]["custom_reward_function"] == {
        "path": "pkg://akka_training.engines.verl.reward_fn",
        "name": "compute_score",
        "reward_kwargs": {"akka_reward_config": str(paths.reward_config)},
    }
    assert config["data"]["val_files"] == str(paths.eval_data)
    # LoRA-only checkpoints, and no rotation of verl's own (the job rotates after its uploads)
    assert actor["checkpoint"]["save_lora_only"] is True
    assert config["trainer"]["max_actor_ckpt_to_keep"] is None
    assert model["lora_alpha"] == 16


def test_verl_validates_what_we_accept_and_refuses_what_we_refuse(
    verl_env: VerlEnv, tmp_path: Path
) -> None:
    accepted = {
        "grpo, 1 GPU": make_spec(),
        "grpo, 4 GPUs": make_spec(gpus=4, rl={"promptsPerStep": 8, "generationsPerPrompt": 2}),
        "gspo, 2 GPUs, KL": make_spec(method="gspo", gpus=2, rl={"klBeta": 0.01}),
        "grpo, 8 GPUs, resume": make_spec(
            gpus=8, resume=True, rl={"promptsPerStep": 16, "generationsPerPrompt": 6}
        ),
    }
    refused = {
        "3 GPUs for 32 completions": make_spec(gpus=3),
        "5 GPUs for 8 x 6 completions": make_spec(
            gpus=5, rl={"promptsPerStep": 8, "generationsPerPrompt": 6}
        ),
    }
    cases = {**accepted, **refused}
    batch = [
        build_overrides(spec, VerlPaths(tmp_path / n.replace(" ", "-"), 1))
        for n, spec in cases.items()
    ]
    # and one that only verl's own actor checks catch
    batch.append(
        [
            *build_overrides(make_spec(), VerlPaths(tmp_path, 1)),
            "actor_rollout_ref.actor.loss_agg_mode=per-token",
        ]
    )
    # and an alpha as a float, which verl's trainer refuses once Ray is up (HFModelConfig)
    batch.append(
        [
            *build_overrides(make_spec(), VerlPaths(tmp_path, 1)),
            "actor_rollout_ref.model.lora_alpha=32.0",
        ]
    )
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(batch))
    done = verl_env.run(["-m", "akka_training.engines.verl.preflight", "--batch", str(cases_file)])
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    answers = dict(zip([*cases, "bad loss aggregation", "float alpha"], lines, strict=True))
    for name, spec in accepted.items():
        assert answers[name]["ok"], (name, answers[name]["error"])
        assert verl_constraints(spec) == [], name
        # validate_config's LoRA-rank check needs vLLM, which only the GPU environment has
        assert answers[name]["skipped"] == ["vLLM's LoRA rank check (vLLM is not installed here)"]
    for name, spec in refused.items():
        assert not answers[name]["ok"], name
        assert "must be divisible by minimal possible batch size" in answers[name]["error"]
        assert any("divisible by execution.gpus" in p for p in verl_constraints(spec)), name
    values = answers["gspo, 2 GPUs, KL"]["values"]
    assert values["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    assert values["trainer.n_gpus_per_node"] == 2
    assert values["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4
    assert answers["grpo, 1 GPU"]["flashAttention"] is False
    assert not answers["bad loss aggregation"]["ok"]
    assert "Invalid loss_agg_mode" in answers["bad loss aggregation"]["error"]
    assert not answers["float alpha"]["ok"]
    assert (
        "'32.0' of type 'float' could not be converted to Integer"
        in (answers["float alpha"]["error"])
    )
    assert done.returncode == 1  # some configuration was refused
