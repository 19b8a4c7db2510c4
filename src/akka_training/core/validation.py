"""The rules a run plan must pass before it may use any device.

`validate` runs every rule over a `Checked` view of the plan (the plan with defaults filled, plus
what the service looked up: the catalog model, the pool, the dataset, the source run) and returns
every problem at once. Each rule is a pure function; each problem says what to set instead.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from akka_training.core.catalog import CatalogModel, engine_for, join_counts
from akka_training.core.errors import Problem
from akka_training.core.limits import INT32_MAX
from akka_training.core.plans import RL_METHODS, Lora, RegexTerm, RunPlan


@dataclass(frozen=True)
class PoolInfo:
    name: str
    max_claim: int
    host_ram_gib: float | None
    # The most devices one node of the pool offered at the cluster's last look (None: unknown,
    # or a pool of one host).
    largest_node: int | None = None


@dataclass(frozen=True)
class DatasetInfo:
    ref: str  # PROJECT/NAME:vN
    format: str
    has_images: bool
    rows: int


@dataclass(frozen=True)
class SourceInfo:
    run: str
    base_model: str
    method: str
    lora: Lora | None
    # The step the run starts from; for a warm start the source's final step.
    step: int
    # The GPU count the source run trained on (None: not recorded).
    gpus: int | None = None


@dataclass
class Checked:
    """A plan with defaults filled, and the results of the service's look-ups. A look-up that
    failed leaves its value None and its sentence in `lookup_problems`."""

    plan: RunPlan
    engine: str  # the deployment's reinforcement engine
    image_text_rl: bool
    model: CatalogModel | None
    pool: PoolInfo | None
    dataset: DatasetInfo | None
    eval_dataset: DatasetInfo | None = None
    source: SourceInfo | None = None
    # The plan set the LoRA rank itself (so a warm start must match it).
    lora_rank_given: int | None = None
    # Inside a pipeline: the dataset is an earlier stage's output, not a registered one.
    dataset_from_stage: str | None = None
    lookup_problems: list[Problem] = field(default_factory=list)

    @property
    def method(self) -> str:
        return self.plan.config.method

    @property
    def is_rl(self) -> bool:
        return self.method in RL_METHODS

    @property
    def method_engine(self) -> str:
        return engine_for(self.method, self.engine)

    @property
    def gpus(self) -> int:
        return self.plan.execution.gpus


Rule = Callable[[Checked], list[Problem]]


def validate(checked: Checked) -> list[Problem]:
    problems = list(checked.lookup_problems)
    for rule in RULES:
        problems.extend(rule(checked))
    return problems


# --- method and catalog ---------------------------------------------------------------------------


def method_sections(c: Checked) -> list[Problem]:
    config = c.plan.config
    out = []
    if c.is_rl and config.hyperparams is not None and "hyperparams" in config.model_fields_set:
        out.append(
            Problem(
                "config.hyperparams",
                f"config.hyperparams is for sft and dpo; a {c.method} run takes "
                "config.rlHyperparams. "
                "Move the settings there or remove config.hyperparams.",
            )
        )
    if not c.is_rl:
        for key, name in (("rl_hyperparams", "rlHyperparams"), ("reward", "reward")):
            if key in config.model_fields_set and getattr(config, key) is not None:
                out.append(
                    Problem(
                        f"config.{name}",
                        f"config.{name} is for grpo and gspo; {_a(c.method)} run takes "
                        "config.hyperparams. Remove it or change config.method.",
                    )
                )
        if config.tools:
            out.append(
                Problem("config.tools", "config.tools is for grpo and gspo runs; remove it.")
            )
        if config.monitors is not None:
            out.append(
                Problem("config.monitors", "config.monitors is for grpo and gspo runs; remove it.")
            )
    preference = config.hyperparams.preference if config.hyperparams is not None else None
    if c.method != "dpo" and preference is not None:
        out.append(
            Problem(
                "config.hyperparams.preference",
                f"config.hyperparams.preference is for dpo; {_a(c.method)} run does not use it. "
                "Remove it or set config.method to dpo.",
            )
        )
    if c.is_rl and (config.reward is None or not config.reward.terms):
        out.append(
            Problem(
                "config.reward.terms",
                f"A {c.method} run needs at least one reward term: add one under "
                "config.reward.terms (for example {name: correct, kind: match, mode: exact}).",
            )
        )
    if c.is_rl and config.reward is not None:
        # Counted once each (linear): a list.count per name was quadratic in the terms.
        counts = Counter(t.name for t in config.reward.terms)
        dupes = sorted(n for n, k in counts.items() if k > 1)
        if dupes:
            out.append(
                Problem(
                    "config.reward.terms",
                    f"Reward term names must be unique; {', '.join(dupes)} appears more than "
                    "once. Rename one.",
                )
            )
    return out


def method_supported(c: Checked) -> list[Problem]:
    if c.model is None:
        return []
    supported = c.model.methods(c.engine, c.image_text_rl)
    if c.method in supported:
        return []
    why = ""
    if c.model.modality == "image-text" and c.is_rl and c.method_engine == "verl":
        why = (
            " (reinforcement over image-text models under verl is not enabled on this "
            "deployment: trainer.reinforcement.image-text)"
        )
    listed = ", ".join(supported) if supported else "nothing"
    return [
        Problem(
            "config.method",
            f"{c.model.id} does not support {c.method} under the {c.method_engine} engine of "
            f"this deployment{why}; it supports: {listed}. Set config.method to one of these "
            "or choose another baseModel.",
        )
    ]


def qualified_gpus(c: Checked) -> list[Problem]:
    if c.model is None or c.method not in c.model.methods(c.engine, c.image_text_rl):
        return []
    counts = c.model.qualified_gpus(c.method, c.engine, c.image_text_rl)
    if c.gpus in counts:
        return []
    return [
        Problem(
            "execution.gpus",
            f"No envelope in this deployment's catalog runs {c.method} on {c.model.id} at "
            f"{c.gpus} GPU(s) under {c.method_engine}: it is qualified at {join_counts(counts)} "
            f"GPU(s). Set execution.gpus to one of these.",
        )
    ]


def pool_fits(c: Checked) -> list[Problem]:
    if c.pool is None:
        return []
    out = []
    if c.gpus > c.pool.max_claim:
        out.append(
            Problem(
                "execution.gpus",
                f"execution.gpus ({c.gpus}) is above the largest claim pool {c.pool.name} "
                f"accepts (MAX CLAIM {c.pool.max_claim}); set execution.gpus to "
                f"{c.pool.max_claim} or less, or choose another execution.pool "
                "(see `akka training capacity`).",
            )
        )
    largest = c.pool.largest_node
    if largest is not None and 0 < largest < c.gpus <= c.pool.max_claim:
        out.append(
            Problem(
                "execution.gpus",
                f"execution.gpus ({c.gpus}) is more than any single node of pool {c.pool.name} "
                f"offers (the largest offers {largest}), and a run's devices are on one node: "
                f"it would wait for devices no node has. Set execution.gpus to {largest} or "
                "less, or choose another execution.pool.",
            )
        )
    envelope = c.model.envelope(c.method, c.engine, c.gpus, c.image_text_rl) if c.model else None
    if (
        envelope is not None
        and c.pool.host_ram_gib is not None
        and envelope.host_memory_gib > c.pool.host_ram_gib
    ):
        out.append(
            Problem(
                "execution.pool",
                f"{c.method} on {c.model.id if c.model else ''} at {c.gpus} GPU(s) needs "
                f"{envelope.host_memory_gib:g} GiB of host memory per node, more than pool "
                f"{c.pool.name} has (HOST RAM {c.pool.host_ram_gib:g} GiB); choose a pool "
                "with more host memory or fewer GPUs.",
            )
        )
    return out


def sequence_lengths(c: Checked) -> list[Problem]:
    config = c.plan.config
    out = []
    if (
        c.model is not None
        and config.max_seq_length
        and config.max_seq_length > c.model.context_length
    ):
        out.append(
            Problem(
                "config.maxSeqLength",
                f"config.maxSeqLength ({config.max_seq_length}) is above the context length of "
                f"{c.model.id} ({c.model.context_length}); set it to {c.model.context_length} "
                "or less.",
            )
        )
    rl = config.rl_hyperparams
    if (
        c.is_rl
        and rl is not None
        and config.max_seq_length
        and rl.max_completion_tokens >= config.max_seq_length
    ):
        out.append(
            Problem(
                "config.rlHyperparams.maxCompletionTokens",
                f"config.rlHyperparams.maxCompletionTokens ({rl.max_completion_tokens}) "
                f"leaves no room for the prompt within config.maxSeqLength "
                f"({config.max_seq_length}); lower maxCompletionTokens or raise "
                "maxSeqLength.",
            )
        )
    return out


def preference_settings(c: Checked) -> list[Problem]:
    """A dpo run's loss settings, and its prompt's share of the sequence."""
    hp = c.plan.config.hyperparams
    if c.method != "dpo" or hp is None or hp.preference is None:
        return []
    preference = hp.preference
    out = []
    smoothing = preference.label_smoothing
    if smoothing > 0 and preference.loss_type in ("ipo", "hinge"):
        out.append(
            Problem(
                "config.hyperparams.preference.labelSmoothing",
                f"config.hyperparams.preference.labelSmoothing ({smoothing:g}) has no effect on "
                f"the {preference.loss_type} loss; set it to 0, or use lossType sigmoid or "
                "robust.",
            )
        )
    limit = c.plan.config.max_seq_length
    prompt = preference.max_prompt_length
    if limit is not None and prompt is not None and prompt >= limit:
        out.append(
            Problem(
                "config.hyperparams.preference.maxPromptLength",
                f"config.hyperparams.preference.maxPromptLength ({prompt}) leaves no room for "
                f"the answers within config.maxSeqLength ({limit}); set it below {limit} "
                "(such as half of it) or raise maxSeqLength.",
            )
        )
    return out


# --- reinforcement shapes ------------------------------------------------------------------------


def prompts_divisible(c: Checked) -> list[Problem]:
    rl = c.plan.config.rl_hyperparams
    if not c.is_rl or rl is None or rl.prompts_per_step % c.gpus == 0:
        return []
    suggestion = c.gpus * max(1, round(rl.prompts_per_step / c.gpus))
    return [
        Problem(
            "config.rlHyperparams.promptsPerStep",
            f"config.rlHyperparams.promptsPerStep ({rl.prompts_per_step}) must be divisible by "
            f"execution.gpus ({c.gpus}); set promptsPerStep to a multiple of {c.gpus} (such as "
            f"{suggestion}) or change execution.gpus.",
        )
    ]


def generation_shapes(c: Checked) -> list[Problem]:
    rl = c.plan.config.rl_hyperparams
    if not c.is_rl or rl is None:
        return []
    out = []
    if rl.generations_per_prompt < 2:
        out.append(
            Problem(
                "config.rlHyperparams.generationsPerPrompt",
                f"config.rlHyperparams.generationsPerPrompt is {rl.generations_per_prompt}; "
                f"{c.method} compares completions of the same prompt, so set it to 2 or more.",
            )
        )
    return out


def rollout_devices(c: Checked) -> list[Problem]:
    """Separate rollout devices and stale rollouts: no engine of this trainer runs them (verl
    and TRL both generate on the training devices, on-policy)."""
    out = []
    execution = c.plan.execution
    engine = c.method_engine
    for key, value in (
        ("rolloutGpus", execution.rollout_gpus),
        ("stalenessThreshold", execution.staleness_threshold),
    ):
        if value > 0:
            out.append(
                Problem(
                    f"execution.{key}",
                    f"execution.{key} ({value}) is not supported under {engine}: the rollout "
                    f"engine runs on the training devices. Leave {key} out or set it to 0, and "
                    "count every device in execution.gpus.",
                )
            )
    return out


def verl_kl_with_source(c: Checked) -> list[Problem]:
    """A KL penalty under verl pulls toward the base model, so a run that starts from another
    run's adapter (a weights branch, a warm start) must not have one. A continuation restores
    a run that trained under the same rules, from the base model or not, and is not refused."""
    rl = c.plan.config.rl_hyperparams
    source = c.plan.source
    if not c.is_rl or c.method_engine != "verl" or rl is None or source is None:
        return []
    if rl.kl_beta <= 0 or source.restore == "trainingState":
        return []
    return [
        Problem(
            "config.rlHyperparams.klBeta",
            f"config.rlHyperparams.klBeta is {rl.kl_beta:g}, but this run starts from another "
            "run's adapter, and verl's reference policy is the base model, so a KL penalty would "
            "pull the run toward the base model rather than toward the adapter it started from. "
            "Set klBeta to 0.",
        )
    ]


def verl_lora_alpha(c: Checked) -> list[Problem]:
    rl = c.plan.config.rl_hyperparams
    if not c.is_rl or c.method_engine != "verl" or rl is None:
        return []
    alpha = rl.lora.alpha
    if alpha == int(alpha):
        return []
    return [
        Problem(
            "config.rlHyperparams.lora.alpha",
            f"config.rlHyperparams.lora.alpha is {alpha:g}, but verl trains with a whole-number "
            f"LoRA alpha; set it to a whole number such as {max(1, round(alpha))}.",
        )
    ]


def verl_continuation_gpus(c: Checked) -> list[Problem]:
    """verl's checkpoints resume only on the GPU count they were saved on."""
    source = c.plan.source
    if (
        not c.is_rl
        or c.method_engine != "verl"
        or source is None
        or source.restore != "trainingState"
        or c.source is None
        or c.source.gpus is None
        or c.source.gpus == c.gpus
    ):
        return []
    return [
        Problem(
            "execution.gpus",
            f"execution.gpus ({c.gpus}) differs from the {c.source.gpus} GPU(s) run "
            f"{c.source.run} trained on, and verl restores a training state only on the GPU "
            f"count it was saved on. Set execution.gpus to {c.source.gpus}, or branch from the "
            "snapshot's weights (`akka training runs branch`) to train on another count.",
        )
    ]


def verl_tools(c: Checked) -> list[Problem]:
    if not c.is_rl or c.method_engine != "verl" or not c.plan.config.tools:
        return []
    return [
        Problem(
            "config.tools",
            "config.tools is not supported under verl: its rollouts run no tools. Remove "
            "config.tools, or train on a deployment whose reinforcement engine is trl.",
        )
    ]


def prompts_within_rows(c: Checked) -> list[Problem]:
    rl = c.plan.config.rl_hyperparams
    if not c.is_rl or rl is None or c.dataset is None or c.dataset.rows == 0:
        return []
    if c.dataset.rows >= rl.prompts_per_step:
        return []
    return [
        Problem(
            "config.rlHyperparams.promptsPerStep",
            f"config.rlHyperparams.promptsPerStep ({rl.prompts_per_step}) is above the "
            f"{c.dataset.rows} row{'' if c.dataset.rows == 1 else 's'} of config.dataset {c.dataset.ref}, so not one step can be "
            f"made; set promptsPerStep to {c.dataset.rows} or less, or register more rows.",
        )
    ]


def steps_storable(c: Checked) -> list[Problem]:
    """A run counts its steps in INTEGER columns: epochs over a large dataset must not make more
    steps than they hold (`maxSteps` is bounded by the schema itself)."""
    config = c.plan.config
    if c.dataset is None or c.dataset.rows == 0:
        return []
    if c.is_rl:
        if config.rl_hyperparams is None:
            return []
        rl = config.rl_hyperparams.training
        section, epochs, max_steps = "rlHyperparams", rl.epochs, rl.max_steps
        per_step = config.rl_hyperparams.prompts_per_step
    else:
        if config.hyperparams is None:
            return []
        sft = config.hyperparams.training
        section, epochs, max_steps = "hyperparams", sft.epochs, sft.max_steps
        per_step = sft.batch_size * sft.gradient_accumulation
    if max_steps is not None:
        return []
    steps = math.ceil(c.dataset.rows / per_step) * epochs
    if steps <= INT32_MAX:
        return []
    return [
        Problem(
            f"config.{section}.training.epochs",
            f"config.{section}.training.epochs ({epochs:g}) over the "
            f"{c.dataset.rows} rows of {c.dataset.ref} makes about {steps:.3g} steps, more than "
            f"a run can count ({INT32_MAX}); lower epochs or set maxSteps.",
        )
    ]


# --- data and source -------------------------------------------------------------------------------


def dataset_fits_method(c: Checked) -> list[Problem]:
    out = []
    for key, info in (("dataset", c.dataset), ("evalDataset", c.eval_dataset)):
        if info is None:
            continue
        format_problem = _format_problem(c.method, info)
        if format_problem is not None:
            out.append(Problem(f"config.{key}", f"config.{key} {format_problem}"))
        if c.is_rl and info.has_images:
            out.append(
                Problem(
                    f"config.{key}",
                    f"config.{key} {info.ref} has rows with images; a grpo or gspo run cannot "
                    "train on images, whatever the base model. Use a text-only dataset, or "
                    "method sft.",
                )
            )
        if c.method == "dpo" and info.has_images:
            out.append(
                Problem(
                    f"config.{key}",
                    f"config.{key} {info.ref} has rows with images; a dpo run trains on text, "
                    "whatever the base model. Use a text-only dataset.",
                )
            )
        elif info.has_images and c.model is not None and c.model.modality == "text":
            out.append(
                Problem(
                    f"config.{key}",
                    f"config.{key} {info.ref} has rows with images, but {c.model.id} is a text "
                    "model; choose an image-text base model or a text-only dataset.",
                )
            )
        if info.rows == 0:
            out.append(
                Problem(
                    f"config.{key}",
                    f"config.{key} {info.ref} has no rows; choose a dataset version that has rows.",
                )
            )
    return out


def _format_problem(method: str, info: DatasetInfo) -> str | None:
    """Why a dataset's rows do not suit `method`, or None: dpo trains on preference pairs, and
    no other method does."""
    if method == "dpo" and info.format != "preference":
        return (
            f"{info.ref} is a {info.format} dataset; a dpo run trains on preference pairs "
            "(prompt, chosen and rejected, or OpenAI's input, preferred_output and "
            "non_preferred_output). Register a preference dataset, or set config.method to sft."
        )
    if method != "dpo" and info.format == "preference":
        return (
            f"{info.ref} is a preference dataset (pairs of a chosen and a rejected answer); "
            f"{_a(method)} run trains on chat or prompt-completion rows. Set config.method to "
            "dpo, or choose a chat or prompt-completion dataset."
        )
    return None


def _a(method: str) -> str:
    """`method` with its article as it is read aloud: an sft, a dpo, a grpo."""
    return f"an {method}" if method == "sft" else f"a {method}"


def source_matches(c: Checked) -> list[Problem]:
    if c.source is None:
        return []
    out = []
    if c.source.base_model != c.plan.base_model:
        out.append(
            Problem(
                "baseModel",
                f"The source run {c.source.run} trained an adapter for {c.source.base_model}, "
                f"not {c.plan.base_model}; set baseModel to {c.source.base_model}.",
            )
        )
    if (
        c.lora_rank_given is not None
        and c.source.lora is not None
        and c.lora_rank_given != c.source.lora.rank
    ):
        section = "rlHyperparams" if c.is_rl else "hyperparams"
        out.append(
            Problem(
                f"config.{section}.lora.rank",
                f"config.{section}.lora.rank ({c.lora_rank_given}) differs from the rank of the "
                f"adapter this run starts from ({c.source.lora.rank}); leave it out or set "
                f"{c.source.lora.rank}.",
            )
        )
    return out


def monitor_terms(c: Checked) -> list[Problem]:
    """The term reward hacking watches must be one of the plan's terms."""
    monitors, reward = c.plan.config.monitors, c.plan.config.reward
    if not c.is_rl or monitors is None or reward is None:
        return []
    names = [t.name for t in reward.terms]
    term = monitors.correctness_term
    if term is not None and term not in names:
        return [
            Problem(
                "config.monitors.correctnessTerm",
                f"config.monitors.correctnessTerm {term!r} is not a reward term of this plan; "
                f"name one of {', '.join(names)}.",
            )
        ]
    has_match = any(t.kind == "match" for t in reward.terms)
    if term is None and not has_match and "reward-hacking" in monitors.pause_on:
        return [
            Problem(
                "config.monitors.pauseOn",
                "reward-hacking watches a correctness term and this plan has no match term: set "
                "config.monitors.correctnessTerm to the term that checks correctness.",
            )
        ]
    return []


def reward_patterns(c: Checked) -> list[Problem]:
    reward = c.plan.config.reward
    if not c.is_rl or reward is None:
        return []
    out = []
    for i, term in enumerate(reward.terms):
        if isinstance(term, RegexTerm):
            try:
                re.compile(term.pattern)
            except re.error as exc:
                out.append(
                    Problem(
                        f"config.reward.terms[{i}].pattern",
                        f"config.reward.terms[{i}].pattern {term.pattern!r} is not a valid "
                        f"regular expression ({exc}); fix the pattern.",
                    )
                )
    return out


RULES: list[Rule] = [
    method_sections,
    method_supported,
    qualified_gpus,
    pool_fits,
    sequence_lengths,
    preference_settings,
    prompts_divisible,
    generation_shapes,
    rollout_devices,
    verl_kl_with_source,
    verl_lora_alpha,
    verl_continuation_gpus,
    verl_tools,
    prompts_within_rows,
    steps_storable,
    dataset_fits_method,
    source_matches,
    reward_patterns,
    monitor_terms,
]
