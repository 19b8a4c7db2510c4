"""The submission rules, in-process: every refusal `core.validation` can give, word for word, on
plans built from `core.plans` with their defaults filled as the service fills them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from akka_training.core.catalog import CatalogModel
from akka_training.core.defaults import fill_defaults
from akka_training.core.documents import deep_merge
from akka_training.core.errors import Problem
from akka_training.core.plans import Lora, MatchTerm, RunPlan
from akka_training.core.validation import (
    RULES,
    Checked,
    DatasetInfo,
    PoolInfo,
    SourceInfo,
    validate,
)

MODEL = CatalogModel.model_validate(
    {
        "id": "qwen-test",
        "path": "/models/qwen-test",
        "contextLength": 4096,
        "envelopes": [
            {"method": "sft", "engine": "trl", "gpus": 1, "hostMemoryGib": 32},
            {"method": "grpo", "engine": "trl", "gpus": 1, "hostMemoryGib": 32},
            {"method": "grpo", "engine": "verl", "gpus": 1, "hostMemoryGib": 64},
            {"method": "grpo", "engine": "verl", "gpus": 4, "hostMemoryGib": 128},
            {"method": "gspo", "engine": "trl", "gpus": 1},
        ],
    }
)
VISION = CatalogModel.model_validate(
    {
        "id": "vision-test",
        "path": "/models/vision-test",
        "modality": "image-text",
        "envelopes": [
            {"method": "sft", "engine": "trl", "gpus": 1},
            {"method": "grpo", "engine": "verl", "gpus": 1},
        ],
    }
)
# Qualified for reinforcement under TRL only: nothing on a verl deployment but what SFT needs.
TRL_RL_ONLY = CatalogModel.model_validate(
    {
        "id": "trl-rl-only",
        "path": "/models/trl-rl-only",
        "envelopes": [{"method": "grpo", "engine": "trl", "gpus": 1}],
    }
)
TRAINING = PoolInfo("training", max_claim=4, host_ram_gib=256)
SMALL = PoolInfo("small", max_claim=2, host_ram_gib=64)
TEXT = DatasetInfo("maths/train:v1", "chat", has_images=False, rows=40)
IMAGES = DatasetInfo("maths/images:v1", "chat", has_images=True, rows=1)
# MODEL, qualified for dpo as well.
PREFERENCE_MODEL = MODEL.model_copy(
    update={
        "envelopes": [
            *MODEL.envelopes,
            *CatalogModel.model_validate(
                {
                    "id": "x",
                    "path": "x",
                    "envelopes": [{"method": "dpo", "engine": "trl", "gpus": 1}],
                }
            ).envelopes,
        ]
    }
)
PAIRS = DatasetInfo("maths/pairs:v1", "preference", has_images=False, rows=40)
EMPTY = DatasetInfo("maths/empty:v1", "chat", has_images=False, rows=0)
SFT_SOURCE = SourceInfo("r1", "qwen-test", "sft", Lora.model_validate({"rank": 8}), step=6)

GRPO: dict[str, Any] = {
    "project": "maths",
    "baseModel": "qwen-test",
    "config": {
        "dataset": "maths/train",
        "method": "grpo",
        "rlHyperparams": {"promptsPerStep": 8, "maxCompletionTokens": 256},
        "reward": {"terms": [{"name": "correct", "kind": "match", "mode": "final-number"}]},
    },
    "execution": {"gpus": 1},
}
SFT: dict[str, Any] = {
    "project": "maths",
    "baseModel": "qwen-test",
    "config": {"dataset": "maths/train", "method": "sft"},
}


def problems(
    base: dict[str, Any],
    changes: dict[str, Any] | None = None,
    *,
    engine: str = "verl",
    image_text_rl: bool = False,
    model: CatalogModel | None = MODEL,
    pool: PoolInfo | None = TRAINING,
    dataset: DatasetInfo | None = TEXT,
    **lookups: Any,
) -> list[tuple[str, str]]:
    """The problems of the plan `base` with `changes` laid over it, on a deployment whose
    reinforcement engine is `engine`, after the service's look-ups gave what the keywords say."""
    plan = RunPlan.model_validate(deep_merge(base, changes or {}))
    envelope = (
        model.envelope(plan.config.method, engine, plan.execution.gpus, image_text_rl)
        if model
        else None
    )
    source = lookups.get("source")
    filled = fill_defaults(
        plan, model, envelope, pool.name if pool else "training", source.lora if source else None
    )
    checked = Checked(
        plan=filled,
        engine=engine,
        image_text_rl=image_text_rl,
        model=model,
        pool=pool,
        dataset=dataset,
        **lookups,
    )
    return [(p.field, p.message) for p in validate(checked)]


def test_plans_inside_their_envelopes_pass() -> None:
    assert problems(GRPO) == []
    assert problems(GRPO, {"execution": {"gpus": 4}}) == []
    assert problems(SFT) == []
    assert problems(SFT, {"config": {"evalDataset": "maths/eval"}}, eval_dataset=TEXT) == []


def test_every_problem_of_a_verl_plan_is_reported_at_once_after_the_lookups() -> None:
    lookup = Problem("project", "There is no project 'maths'; create it.")
    assert problems(
        GRPO,
        {
            "source": {"run": "r1"},
            "config": {"rlHyperparams": {"klBeta": 0.1}},
            "execution": {"gpus": 3, "rolloutGpus": 1, "stalenessThreshold": 2},
        },
        dataset=IMAGES,
        source=SFT_SOURCE,
        lookup_problems=[lookup],
    ) == [
        ("project", "There is no project 'maths'; create it."),
        (
            "execution.gpus",
            "No envelope in this deployment's catalog runs grpo on qwen-test at 3 GPU(s) under "
            "verl: it is qualified at 1 or 4 GPU(s). Set execution.gpus to one of these.",
        ),
        (
            "config.rlHyperparams.promptsPerStep",
            "config.rlHyperparams.promptsPerStep (8) must be divisible by execution.gpus (3); set "
            "promptsPerStep to a multiple of 3 (such as 9) or change execution.gpus.",
        ),
        (
            "execution.rolloutGpus",
            "execution.rolloutGpus (1) is not supported under verl: the rollout engine runs on the "
            "training devices. Leave rolloutGpus out or set it to 0, and count every device in "
            "execution.gpus.",
        ),
        (
            "execution.stalenessThreshold",
            "execution.stalenessThreshold (2) is not supported under verl: the rollout engine runs "
            "on the training devices. Leave stalenessThreshold out or set it to 0, and count every "
            "device in execution.gpus.",
        ),
        (
            "config.rlHyperparams.klBeta",
            "config.rlHyperparams.klBeta is 0.1, but this run starts from another run's adapter, "
            "and verl's reference policy is the base model, so a KL penalty would pull the run "
            "toward the base model rather than toward the adapter it started from. Set klBeta "
            "to 0.",
        ),
        (
            "config.rlHyperparams.promptsPerStep",
            "config.rlHyperparams.promptsPerStep (8) is above the 1 row of config.dataset "
            "maths/images:v1, so not one step can be made; set promptsPerStep to 1 or less, or "
            "register more rows.",
        ),
        (
            "config.dataset",
            "config.dataset maths/images:v1 has rows with images; a grpo or gspo run cannot train "
            "on images, whatever the base model. Use a text-only dataset, or method sft.",
        ),
        (
            "config.dataset",
            "config.dataset maths/images:v1 has rows with images, but qwen-test is a text model; "
            "choose an image-text base model or a text-only dataset.",
        ),
    ]


def test_the_verl_only_rules_leave_a_trl_deployment_alone() -> None:
    assert (
        problems(
            GRPO,
            {
                "source": {"run": "r1"},
                "config": {
                    "rlHyperparams": {"klBeta": 0.1},
                    "tools": [{"name": "add", "bundle": "maths/tools:v1", "function": "t:add"}],
                },
            },
            engine="trl",
            source=SFT_SOURCE,
        )
        == []
    )


def test_a_fractional_lora_alpha_under_verl() -> None:
    fractional = {"config": {"rlHyperparams": {"lora": {"alpha": 0.5}}}}
    assert problems(GRPO, fractional) == [
        (
            "config.rlHyperparams.lora.alpha",
            "config.rlHyperparams.lora.alpha is 0.5, but verl trains with a whole-number LoRA "
            "alpha; set it to a whole number such as 1.",
        )
    ]
    assert problems(GRPO, {"config": {"rlHyperparams": {"lora": {"alpha": 32.0}}}}) == []
    assert problems(GRPO, fractional, engine="trl") == []


def test_rollout_devices_are_refused_under_trl_too() -> None:
    assert problems(
        GRPO, {"execution": {"rolloutGpus": 1, "stalenessThreshold": 2}}, engine="trl"
    ) == [
        (
            "execution.rolloutGpus",
            "execution.rolloutGpus (1) is not supported under trl: the rollout engine runs on the "
            "training devices. Leave rolloutGpus out or set it to 0, and count every device in "
            "execution.gpus.",
        ),
        (
            "execution.stalenessThreshold",
            "execution.stalenessThreshold (2) is not supported under trl: the rollout engine runs "
            "on the training devices. Leave stalenessThreshold out or set it to 0, and count every "
            "device in execution.gpus.",
        ),
    ]


GRPO_SOURCE = SourceInfo("r2", "qwen-test", "grpo", Lora.model_validate({"rank": 8}), 4, gpus=1)


def test_a_continuation_under_verl_keeps_its_klbeta_and_its_gpu_count() -> None:
    continuation = {"source": {"run": "r2", "snapshot": "step-4", "restore": "trainingState"}}
    # A run that started from the base model with a KL penalty may be continued.
    assert (
        problems(
            GRPO,
            {**continuation, "config": {"rlHyperparams": {"klBeta": 0.1}}},
            source=GRPO_SOURCE,
        )
        == []
    )
    assert problems(GRPO, {**continuation, "execution": {"gpus": 4}}, source=GRPO_SOURCE) == [
        (
            "execution.gpus",
            "execution.gpus (4) differs from the 1 GPU(s) run r2 trained on, and verl restores a "
            "training state only on the GPU count it was saved on. Set execution.gpus to 1, or "
            "branch from the snapshot's weights (`akka training runs branch`) to train on another "
            "count.",
        )
    ]
    # A weights branch still may not carry a KL penalty.
    assert [
        field
        for field, _ in problems(
            GRPO,
            {
                "source": {"run": "r2", "snapshot": "step-4"},
                "config": {"rlHyperparams": {"klBeta": 0.1}},
            },
            source=GRPO_SOURCE,
        )
    ] == ["config.rlHyperparams.klBeta"]


def test_tools_under_verl_and_more_prompts_a_step_than_rows() -> None:
    few = DatasetInfo("maths/few:v1", "chat", has_images=False, rows=5)
    tools = [{"name": "add", "bundle": "maths/tools:v1", "function": "t:add"}]
    assert problems(GRPO, {"config": {"tools": tools}}, dataset=few) == [
        (
            "config.tools",
            "config.tools is not supported under verl: its rollouts run no tools. Remove "
            "config.tools, or train on a deployment whose reinforcement engine is trl.",
        ),
        (
            "config.rlHyperparams.promptsPerStep",
            "config.rlHyperparams.promptsPerStep (8) is above the 5 rows of config.dataset "
            "maths/few:v1, so not one step can be made; set promptsPerStep to 5 or less, or "
            "register more rows.",
        ),
    ]


def test_a_reinforcement_plan_with_sft_settings_and_no_reward() -> None:
    plan = {**GRPO, "config": {**GRPO["config"], "hyperparams": {}, "reward": {"terms": []}}}
    assert problems(plan) == [
        (
            "config.hyperparams",
            "config.hyperparams is for sft and dpo; a grpo run takes config.rlHyperparams. "
            "Move the settings there or remove config.hyperparams.",
        ),
        (
            "config.reward.terms",
            "A grpo run needs at least one reward term: add one under config.reward.terms (for "
            "example {name: correct, kind: match, mode: exact}).",
        ),
    ]


def test_reward_term_names_must_be_unique() -> None:
    terms = [
        {"name": "correct", "kind": "match"},
        {"name": "format", "kind": "regex", "pattern": "####"},
        {"name": "correct", "kind": "match", "mode": "contains"},
        {"name": "format", "kind": "length", "maxTokens": 64},
    ]
    assert problems(GRPO, {"config": {"reward": {"terms": terms}}}) == [
        (
            "config.reward.terms",
            "Reward term names must be unique; correct, format appears more than once. Rename one.",
        )
    ]


def test_the_rules_take_linear_time_in_the_reward_terms() -> None:
    """The schema refuses more than 64 terms; the rules must not depend on it. 150k terms
    through the rules once took minutes (a `list.count` per name): 50k would keep a quadratic
    rule busy over ten seconds, where building them is most of a linear one's second."""
    plan = fill_defaults(RunPlan.model_validate(GRPO), MODEL, None, "training", None)
    assert plan.config.reward is not None
    terms = [MatchTerm(name=f"t{i}", kind="match") for i in range(50_000)]
    plan.config.reward.terms = [*terms, MatchTerm(name="t7", kind="match")]
    checked = Checked(
        plan=plan, engine="verl", image_text_rl=False, model=MODEL, pool=TRAINING, dataset=TEXT
    )
    # In this process's CPU seconds: what other processes do to the machine does not count.
    started = time.process_time()
    found = [(p.field, p.message) for p in validate(checked)]
    assert time.process_time() - started < 2
    assert found == [
        (
            "config.reward.terms",
            "Reward term names must be unique; t7 appears more than once. Rename one.",
        )
    ]


def test_epochs_that_make_more_steps_than_a_run_counts() -> None:
    huge = DatasetInfo("maths/huge:v1", "chat", has_images=False, rows=2_000_000_000)
    changes = {"hyperparams": {"training": {"epochs": 100, "batchSize": 8}}}
    assert problems(SFT, {"config": changes}, dataset=huge) == [
        (
            "config.hyperparams.training.epochs",
            "config.hyperparams.training.epochs (100) over the 2000000000 rows of maths/huge:v1 "
            "makes about 2.5e+10 steps, more than a run can count (2147483647); lower epochs or "
            "set maxSteps.",
        )
    ]
    changes["hyperparams"]["training"]["maxSteps"] = 1000
    assert problems(SFT, {"config": changes}, dataset=huge) == []
    rl = {"config": {"rlHyperparams": {"training": {"epochs": 10000}}}}
    assert problems(GRPO, rl, dataset=huge)[0][0] == "config.rlHyperparams.training.epochs"


def test_an_sft_plan_with_reinforcement_settings() -> None:
    plan = deep_merge(
        SFT,
        {
            "config": {
                "rlHyperparams": {"promptsPerStep": 4},
                "reward": {"terms": [{"name": "correct", "kind": "match"}]},
                "tools": [{"name": "add", "bundle": "maths/tools", "function": "tools:add"}],
            }
        },
    )
    assert problems(plan) == [
        (
            "config.rlHyperparams",
            "config.rlHyperparams is for grpo and gspo; an sft run takes config.hyperparams. "
            "Remove it or change config.method.",
        ),
        (
            "config.reward",
            "config.reward is for grpo and gspo; an sft run takes config.hyperparams. Remove it "
            "or change config.method.",
        ),
        ("config.tools", "config.tools is for grpo and gspo runs; remove it."),
    ]


@pytest.mark.parametrize(
    ("model", "method", "image_text_rl", "message"),
    [
        (
            MODEL,
            "gspo",
            False,
            "qwen-test does not support gspo under the verl engine of this deployment; it "
            "supports: sft, grpo. Set config.method to one of these or choose another baseModel.",
        ),
        (
            VISION,
            "grpo",
            False,
            "vision-test does not support grpo under the verl engine of this deployment "
            "(reinforcement over image-text models under verl is not enabled on this deployment: "
            "trainer.reinforcement.image-text); it supports: sft. Set config.method to one of "
            "these or choose another baseModel.",
        ),
        (
            TRL_RL_ONLY,
            "sft",
            False,
            "trl-rl-only does not support sft under the trl engine of this deployment; it "
            "supports: nothing. Set config.method to one of these or choose another baseModel.",
        ),
    ],
)
def test_a_method_the_model_lacks_lists_what_it_supports(
    model: CatalogModel, method: str, image_text_rl: bool, message: str
) -> None:
    base = GRPO if method != "sft" else SFT
    plan = deep_merge(base, {"baseModel": model.id, "config": {"method": method}})
    # A method the model lacks is one problem: the GPU counts it is qualified at are not asked.
    assert problems(plan, model=model, image_text_rl=image_text_rl) == [("config.method", message)]


def test_image_text_reinforcement_under_verl_when_the_deployment_enables_it() -> None:
    plan = deep_merge(GRPO, {"baseModel": "vision-test"})
    assert problems(plan, model=VISION, image_text_rl=True) == []


def test_a_claim_larger_than_the_pool_and_an_envelope_needing_more_host_memory() -> None:
    plan = deep_merge(GRPO, {"execution": {"gpus": 4, "pool": "small"}})
    assert problems(plan, pool=SMALL) == [
        (
            "execution.gpus",
            "execution.gpus (4) is above the largest claim pool small accepts (MAX CLAIM 2); set "
            "execution.gpus to 2 or less, or choose another execution.pool (see `akka training "
            "capacity`).",
        ),
        (
            "execution.pool",
            "grpo on qwen-test at 4 GPU(s) needs 128 GiB of host memory per node, more than pool "
            "small has (HOST RAM 64 GiB); choose a pool with more host memory or fewer GPUs.",
        ),
    ]


def test_a_claim_larger_than_any_single_node_of_the_pool() -> None:
    nodes = PoolInfo("training", max_claim=4, host_ram_gib=256, largest_node=2)
    assert problems(GRPO, {"execution": {"gpus": 4}}, pool=nodes) == [
        (
            "execution.gpus",
            "execution.gpus (4) is more than any single node of pool training offers (the "
            "largest offers 2), and a run's devices are on one node: it would wait for devices "
            "no node has. Set execution.gpus to 2 or less, or choose another execution.pool.",
        )
    ]
    assert problems(GRPO, {"execution": {"gpus": 1}}, pool=nodes) == []


def test_sequence_lengths_beyond_the_model_or_without_room_for_a_prompt() -> None:
    assert problems(GRPO, {"config": {"maxSeqLength": 8192}}) == [
        (
            "config.maxSeqLength",
            "config.maxSeqLength (8192) is above the context length of qwen-test (4096); set it "
            "to 4096 or less.",
        )
    ]
    no_room = {"config": {"maxSeqLength": 256, "rlHyperparams": {"maxCompletionTokens": 256}}}
    assert problems(GRPO, no_room) == [
        (
            "config.rlHyperparams.maxCompletionTokens",
            "config.rlHyperparams.maxCompletionTokens (256) leaves no room for the prompt within "
            "config.maxSeqLength (256); lower maxCompletionTokens or raise maxSeqLength.",
        )
    ]


def test_one_generation_per_prompt_compares_nothing() -> None:
    plan = deep_merge(
        GRPO, {"config": {"method": "gspo", "rlHyperparams": {"generationsPerPrompt": 1}}}
    )
    assert problems(plan, engine="trl") == [
        (
            "config.rlHyperparams.generationsPerPrompt",
            "config.rlHyperparams.generationsPerPrompt is 1; gspo compares completions of the "
            "same prompt, so set it to 2 or more.",
        )
    ]


def test_datasets_that_do_not_fit_the_model_or_hold_nothing() -> None:
    plan = deep_merge(SFT, {"config": {"evalDataset": "maths/images"}})
    assert problems(plan, dataset=EMPTY, eval_dataset=IMAGES) == [
        (
            "config.dataset",
            "config.dataset maths/empty:v1 has no rows; choose a dataset version that has rows.",
        ),
        (
            "config.evalDataset",
            "config.evalDataset maths/images:v1 has rows with images, but qwen-test is a text "
            "model; choose an image-text base model or a text-only dataset.",
        ),
    ]
    # Supervised training on images is what an image-text model is for.
    vision = deep_merge(SFT, {"baseModel": "vision-test"})
    assert problems(vision, model=VISION, dataset=IMAGES) == []


def test_a_source_of_another_base_model_or_another_lora_rank() -> None:
    other = SourceInfo("r1", "other-model", "sft", Lora.model_validate({"rank": 8}), step=6)
    plan = deep_merge(
        GRPO, {"source": {"run": "r1"}, "config": {"rlHyperparams": {"lora": {"rank": 16}}}}
    )
    assert problems(plan, engine="trl", source=other, lora_rank_given=16) == [
        (
            "baseModel",
            "The source run r1 trained an adapter for other-model, not qwen-test; set baseModel "
            "to other-model.",
        ),
        (
            "config.rlHyperparams.lora.rank",
            "config.rlHyperparams.lora.rank (16) differs from the rank of the adapter this run "
            "starts from (8); leave it out or set 8.",
        ),
    ]
    sft = deep_merge(SFT, {"source": {"run": "r1"}})
    assert problems(sft, source=SFT_SOURCE, lora_rank_given=4) == [
        (
            "config.hyperparams.lora.rank",
            "config.hyperparams.lora.rank (4) differs from the rank of the adapter this run starts "
            "from (8); leave it out or set 8.",
        )
    ]


def test_a_reward_pattern_that_does_not_compile() -> None:
    terms = [
        {"name": "correct", "kind": "match"},
        {"name": "format", "kind": "regex", "pattern": "([0-9"},
    ]
    assert problems(GRPO, {"config": {"reward": {"terms": terms}}}) == [
        (
            "config.reward.terms[1].pattern",
            "config.reward.terms[1].pattern '([0-9' is not a valid regular expression "
            "(unterminated character set at position 1); fix the pattern.",
        )
    ]


def test_monitors_on_an_sft_run() -> None:
    assert problems(SFT, {"config": {"monitors": {"pauseOn": ["zero-spread"]}}}) == [
        ("config.monitors", "config.monitors is for grpo and gspo runs; remove it.")
    ]


def test_a_correctness_term_the_plan_does_not_have() -> None:
    assert problems(GRPO, {"config": {"monitors": {"correctnessTerm": "right"}}}) == [
        (
            "config.monitors.correctnessTerm",
            "config.monitors.correctnessTerm 'right' is not a reward term of this plan; name "
            "one of correct.",
        )
    ]


def test_reward_hacking_without_a_term_to_watch() -> None:
    terms = [{"name": "format", "kind": "regex", "pattern": "####"}]
    changes = {"config": {"reward": {"terms": terms}, "monitors": {"pauseOn": ["reward-hacking"]}}}
    assert problems(GRPO, changes) == [
        (
            "config.monitors.pauseOn",
            "reward-hacking watches a correctness term and this plan has no match term: set "
            "config.monitors.correctnessTerm to the term that checks correctness.",
        )
    ]


def test_an_unknown_monitor_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="answer-collapse"):
        RunPlan.model_validate(deep_merge(GRPO, {"config": {"monitors": {"pauseOn": ["bogus"]}}}))


def test_every_rule_is_covered_here() -> None:
    """A rule added to `RULES` needs its refusal here too."""
    covered = {
        "method_sections",
        "method_supported",
        "qualified_gpus",
        "pool_fits",
        "sequence_lengths",
        "preference_settings",
        "prompts_divisible",
        "generation_shapes",
        "rollout_devices",
        "verl_kl_with_source",
        "verl_lora_alpha",
        "verl_continuation_gpus",
        "verl_tools",
        "prompts_within_rows",
        "steps_storable",
        "dataset_fits_method",
        "source_matches",
        "reward_patterns",
        "monitor_terms",
    }
    assert {rule.__name__ for rule in RULES} == covered


DPO: dict[str, Any] = {
    "project": "maths",
    "baseModel": "qwen-test",
    "config": {"dataset": "maths/pairs", "method": "dpo"},
}


def test_a_dpo_plan_over_pairs_passes_with_every_default_filled() -> None:
    assert problems(DPO, model=PREFERENCE_MODEL, dataset=PAIRS) == []
    assert problems(DPO, engine="trl", model=PREFERENCE_MODEL, dataset=PAIRS) == []
    plan = fill_defaults(RunPlan.model_validate(DPO), PREFERENCE_MODEL, None, "training")
    assert plan.config.hyperparams is not None
    assert plan.config.hyperparams.preference is not None
    assert plan.config.hyperparams.preference.to_json() == {
        "beta": 0.1,
        "lossType": "sigmoid",
        "labelSmoothing": 0.0,
        "maxPromptLength": 1024,
    }


def test_a_dataset_of_the_wrong_kind_is_refused_with_the_method_to_use() -> None:
    assert problems(DPO, model=PREFERENCE_MODEL, dataset=TEXT) == [
        (
            "config.dataset",
            "config.dataset maths/train:v1 is a chat dataset; a dpo run trains on preference "
            "pairs (prompt, chosen and rejected, or OpenAI's input, preferred_output and "
            "non_preferred_output). Register a preference dataset, or set config.method to sft.",
        )
    ]
    for plan, article in ((SFT, "an sft"), (GRPO, "a grpo")):
        assert problems(plan, dataset=PAIRS) == [
            (
                "config.dataset",
                "config.dataset maths/pairs:v1 is a preference dataset (pairs of a chosen and a "
                f"rejected answer); {article} run trains on chat or prompt-completion rows. Set "
                "config.method to dpo, or choose a chat or prompt-completion dataset.",
            )
        ]


def test_every_problem_of_a_dpo_plan_comes_at_once() -> None:
    changes = {
        "config": {
            "maxSeqLength": 512,
            "hyperparams": {
                "preference": {"lossType": "ipo", "labelSmoothing": 0.1, "maxPromptLength": 512}
            },
            "reward": {"terms": []},
        }
    }
    assert problems(DPO, changes, model=PREFERENCE_MODEL, dataset=PAIRS) == [
        (
            "config.reward",
            "config.reward is for grpo and gspo; a dpo run takes config.hyperparams. Remove it "
            "or change config.method.",
        ),
        (
            "config.hyperparams.preference.labelSmoothing",
            "config.hyperparams.preference.labelSmoothing (0.1) has no effect on the ipo loss; "
            "set it to 0, or use lossType sigmoid or robust.",
        ),
        (
            "config.hyperparams.preference.maxPromptLength",
            "config.hyperparams.preference.maxPromptLength (512) leaves no room for the answers "
            "within config.maxSeqLength (512); set it below 512 (such as half of it) or raise "
            "maxSeqLength.",
        ),
    ]


def test_a_dpo_run_trains_on_text() -> None:
    pictured = DatasetInfo("maths/pictures:v1", "preference", has_images=True, rows=4)
    assert problems(DPO, model=PREFERENCE_MODEL, dataset=pictured) == [
        (
            "config.dataset",
            "config.dataset maths/pictures:v1 has rows with images; a dpo run trains on text, "
            "whatever the base model. Use a text-only dataset.",
        )
    ]


def test_a_dpo_run_continues_a_training_state_or_branches() -> None:
    """A continuation keeps the reference of the run it continues (recorded in its settings),
    so it is no longer refused."""
    continuing = {"source": {"run": "r1", "snapshot": "step-6", "restore": "trainingState"}}
    assert problems(DPO, continuing, model=PREFERENCE_MODEL, dataset=PAIRS, source=SFT_SOURCE) == []
    branching = {"source": {"run": "r1", "snapshot": "step-6"}}
    assert problems(DPO, branching, model=PREFERENCE_MODEL, dataset=PAIRS, source=SFT_SOURCE) == []


def test_preference_settings_belong_to_dpo() -> None:
    assert problems(SFT, {"config": {"hyperparams": {"preference": {"beta": 0.2}}}}) == [
        (
            "config.hyperparams.preference",
            "config.hyperparams.preference is for dpo; an sft run does not use it. Remove it or "
            "set config.method to dpo.",
        )
    ]


def test_dpo_trains_on_trl_whatever_the_reinforcement_engine() -> None:
    assert PREFERENCE_MODEL.methods("verl", False) == ["sft", "dpo", "grpo"]
    assert PREFERENCE_MODEL.methods("trl", False) == ["sft", "dpo", "grpo", "gspo"]
    assert PREFERENCE_MODEL.qualified_gpus("dpo", "verl", False) == [1]
    assert problems(DPO, dataset=PAIRS) == [
        (
            "config.method",
            "qwen-test does not support dpo under the trl engine of this deployment; it "
            "supports: sft, grpo. Set config.method to one of these or choose another baseModel.",
        )
    ]
