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

from akka_training.core.resolved import JobSpec
from akka_training.engines.verl.overrides import (
    build_overrides,
    runtime_env_overrides,
    schedule_steps,
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


# Builds the learning-rate schedule from a configuration main_ppo composed, as verl's FSDP
# engine builds it (engine/fsdp/transformer_impl.py `_build_lr_scheduler`, with the total
# steps the trainer injects from trainer.total_training_steps), steps it, and prints the rates.
SCHEDULE = """
import json, sys, torch, yaml
from verl.utils.torch_functional import get_constant_schedule_with_warmup
config = yaml.safe_load(open(sys.argv[1]))
optim = config["actor_rollout_ref"]["actor"]["optim"]
total = config["trainer"]["total_training_steps"]
assert optim["lr_scheduler_type"] == "constant", optim["lr_scheduler_type"]
warmup = optim["lr_warmup_steps"]
if warmup is None or warmup <= 0:
    warmup = int(optim["lr_warmup_steps_ratio"] * total)
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=optim["lr"])
scheduler = get_constant_schedule_with_warmup(optimizer=optimizer, num_warmup_steps=warmup)
start = int(sys.argv[2])
if start:  # as verl's checkpoint manager restores them: the optimizer, then the scheduler
    saved = torch.load(sys.argv[3])
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
rates = []
for _ in range(start, total):
    rates.append(optimizer.param_groups[0]["lr"])
    optimizer.step()
    scheduler.step()
    if len(rates) + start == int(sys.argv[4]):
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, sys.argv[3])
print(json.dumps(rates))
"""


def test_a_continuation_trains_n_more_steps_at_the_rates_of_the_uninterrupted_run(
    verl_env: VerlEnv, tmp_path: Path
) -> None:
    # `runs continue RUN --snapshot step-10 --steps 5` of a 50-step run that warms up over half
    # its steps: the service plans 5 steps; the job restores step 10 and its manifest's 50-step
    # schedule, so it is still warming up (verl alone would warm up over half of 15 steps).
    optimizer = {"learningRate": 1e-3, "warmupRatio": 0.5}
    source_run = make_spec(rl={"training": {"maxSteps": 50}, "optimizer": optimizer})
    source = {
        "kind": "continue",
        "run": "r0",
        "snapshot": "step-10",
        "step": 10,
        "weights": "w",
        "trainingState": "t",
    }
    continued = make_spec(source=source, rl={"training": {"maxSteps": 5}, "optimizer": optimizer})
    script = tmp_path / "schedule.py"
    script.write_text(SCHEDULE)
    state = tmp_path / "scheduler.pt"

    def rates(spec: JobSpec, schedule: int, start: int) -> list[float]:
        paths = VerlPaths(tmp_path / f"from-{start}", 1)
        overrides = build_overrides(spec, paths, schedule=schedule)
        composed = verl_env.run(["-m", "verl.trainer.main_ppo", "--cfg", "job", *overrides])
        assert composed.returncode == 0, composed.stderr[-3000:]
        config = tmp_path / f"config-{start}.yaml"
        config.write_text(composed.stdout)
        done = verl_env.run([str(script), str(config), str(start), str(state), "10"])
        assert done.returncode == 0, done.stderr[-3000:]
        return list(json.loads(done.stdout.strip().splitlines()[-1]))

    uninterrupted = rates(source_run, schedule_steps(source_run), 0)
    assert len(uninterrupted) == 50
    assert uninterrupted[10] == pytest.approx(1e-3 * 10 / 25)  # warming up over 25 steps
    after = rates(continued, schedule_steps(continued, saved=50), 10)
    assert len(after) == 5  # exactly the steps asked
    assert after == pytest.approx(uninterrupted[10:15], rel=1e-12)
