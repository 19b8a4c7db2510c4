"""Check a verl configuration with verl itself, before any GPU is touched.

Run with verl's interpreter (never imported by the trainer's)::

    python -m akka_training.engines.verl.preflight OVERRIDE...
    python -m akka_training.engines.verl.preflight --batch CASES.json   # a JSON list of lists

It composes verl's trainer configuration with the overrides exactly as
``verl.trainer.main_ppo`` does (same config directory, same ``ppo_trainer`` root), then runs the
checks ``main_ppo`` runs before it starts Ray: ``validate_config`` (batch divisibility, micro
batch sizes, actor settings, the LoRA rank vLLM accepts) and the loading of the custom reward
function, plus the types of the model section as verl's trainer reads it once Ray is up
(``HFModelConfig``: ``lora_alpha: 32.0`` is refused there, after minutes of start-up). It
prints one JSON line per configuration, ``{"ok", "error", "skipped", "values",
"flashAttention"}``,
and exits 0 when every configuration passed, 1 when verl refused one.

`skipped` names the checks that need packages a CPU environment lacks: verl's LoRA-rank check
imports vLLM, which exists only in the GPU environment (the trainer checks the rank itself,
`overrides.verl_constraints`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import verl.trainer.main_ppo
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config
from verl.utils.device import auto_set_device
from verl.workers.config.model import HFModelConfig

# Keys echoed back so a caller can see what verl made of the overrides.
ECHOED = (
    "algorithm.adv_estimator",
    "data.train_batch_size",
    "data.max_prompt_length",
    "data.max_response_length",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.name",
    "actor_rollout_ref.rollout.tensor_model_parallel_size",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.model.lora_rank",
    "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules",
    "actor_rollout_ref.model.lora_adapter_path",
    "trainer.n_gpus_per_node",
    "trainer.nnodes",
    "trainer.total_training_steps",
    "trainer.save_freq",
    "trainer.resume_mode",
    "trainer.logger",
    "ray_kwargs.ray_init.address",
    "reward.custom_reward_function.reward_kwargs",
)


def check(overrides: list[str]) -> dict[str, Any]:
    """Compose and validate; never raises for a configuration verl refuses."""
    config_dir = Path(verl.trainer.main_ppo.__file__).with_name("config")
    skipped: list[str] = []
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            config = compose(config_name="ppo_trainer", overrides=overrides)
        auto_set_device(config)
        checked = config
        if config.actor_rollout_ref.rollout.name == "vllm" and find_spec("vllm") is None:
            # validate_config's last check (the LoRA rank vLLM serves) imports vLLM, and is the
            # only one that reads the rollout's name: validate a copy under another name.
            checked = copy.deepcopy(config)
            checked.actor_rollout_ref.rollout.name = "vllm-not-installed"
            skipped.append("vLLM's LoRA rank check (vLLM is not installed here)")
        validate_config(
            config=checked,
            use_reference_policy=need_reference_policy(config),
            use_critic=need_critic(config),
        )
        # The schema alone: HFModelConfig's __post_init__ loads the model, which may not be here.
        model = OmegaConf.to_container(config.actor_rollout_ref.model, resolve=True)
        assert isinstance(model, dict)
        OmegaConf.merge(
            OmegaConf.structured(HFModelConfig),
            {k: v for k, v in model.items() if k in HFModelConfig.__dataclass_fields__},
        )
        if get_custom_reward_fn(config) is None:
            raise ValueError("no custom reward function is configured")
    except Exception as exc:
        return {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "skipped": skipped,
            "values": {},
        }
    values = {key: _plain(OmegaConf.select(config, key)) for key in ECHOED}
    return {
        "ok": True,
        "error": None,
        "skipped": skipped,
        "values": values,
        # Whether the training model can use FlashAttention 2 here (see overrides.Attention).
        "flashAttention": find_spec("flash_attn") is not None,
    }


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--batch"]:
        # Several configurations in one process (verl's import is the slow part).
        cases = json.loads(Path(args[1]).read_text(encoding="utf-8"))
    else:
        cases = [args]
    results = []
    for overrides in cases:
        # verl prints progress on stdout; keep stdout for the answers.
        with contextlib.redirect_stdout(sys.stderr):
            results.append(check(overrides))
    for result in results:
        print(json.dumps(result))
    return 0 if all(r["ok"] for r in results) else 1


def _plain(value: Any) -> Any:
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


if __name__ == "__main__":
    sys.exit(main())
