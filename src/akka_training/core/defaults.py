"""The defaults that depend on the method, the catalog or the run a plan starts from.

Every other default is a field default in `akka_training.core.plans`. `fill_defaults` returns a
plan in which nothing is left to choose: it is what `--show-resolved` prints.
"""

from __future__ import annotations

from akka_training.core.catalog import CatalogModel, Envelope
from akka_training.core.plans import (
    RL_METHODS,
    Clip,
    Lora,
    Preference,
    Reward,
    RlHyperparams,
    RunPlan,
    SftHyperparams,
)

DEFAULT_MAX_SEQ_LENGTH = 2048
# GSPO's ratio is a sequence-level geometric mean, so its useful clip range is far narrower.
CLIP_BY_METHOD: dict[str, Clip] = {
    "grpo": Clip(low=0.2, high=0.28),
    "gspo": Clip(low=3.0e-4, high=4.0e-4),
}


def fill_defaults(
    plan: RunPlan,
    model: CatalogModel | None,
    envelope: Envelope | None,
    pool: str,
    source_lora: Lora | None = None,
) -> RunPlan:
    """A copy of `plan` with every default filled in."""
    plan = plan.model_copy(deep=True)
    config = plan.config
    if config.method in RL_METHODS:
        rl = config.rl_hyperparams or RlHyperparams()
        if rl.clip is None:
            rl.clip = CLIP_BY_METHOD[config.method].model_copy()
        if source_lora is not None:
            rl.lora = source_lora.model_copy()
        config.rl_hyperparams = rl
        config.reward = config.reward or Reward()
    else:
        sft = config.hyperparams or SftHyperparams()
        if source_lora is not None:
            sft.lora = source_lora.model_copy()
        config.hyperparams = sft
    if config.max_seq_length is None:
        limit = model.context_length if model else DEFAULT_MAX_SEQ_LENGTH
        config.max_seq_length = min(DEFAULT_MAX_SEQ_LENGTH, limit)
    if config.method == "dpo" and config.hyperparams is not None:
        preference = config.hyperparams.preference or Preference()
        if preference.max_prompt_length is None:
            preference.max_prompt_length = config.max_seq_length // 2
        config.hyperparams.preference = preference
    if config.model.precision is None and envelope is not None:
        config.model.precision = envelope.precision
    if plan.execution.pool is None:
        plan.execution.pool = pool
    return plan


def lora_of(plan_json: dict[str, object]) -> Lora | None:
    """The LoRA settings a resolved run trained with (from its stored settings)."""
    config = plan_json.get("config")
    if not isinstance(config, dict):
        return None
    for key in ("hyperparams", "rlHyperparams"):
        section = config.get(key)
        if isinstance(section, dict) and isinstance(section.get("lora"), dict):
            return Lora.model_validate(section["lora"])
    return None
