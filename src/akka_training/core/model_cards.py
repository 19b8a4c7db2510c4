"""The model card (``README.md``) a downloaded adapter or merged model carries: what it is a
version of, how it was trained (method, dataset with version and hash, steps, final loss or
reward, lineage) and the resolved settings, in the Hugging Face Hub's card format (YAML front
matter, then Markdown), so that `huggingface_hub.upload_folder` publishes it as it is.

The service writes the card from the run's rows, the same each time it is asked for (the
manifest's checksum of it holds when the file is fetched); a training job writes the same card
from its spec for the run's experiment tracking."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from akka_training.core.catalog import CatalogModel

# `max_lora_rank` values vLLM accepts (vllm.config.lora); a server must be started with one at
# least as large as the adapter's rank.
VLLM_MAX_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class CardFacts:
    """What a card says, gathered from the run, the snapshot and the catalog."""

    name: str
    kind: str  # adapter | merged
    run_id: str
    project: str
    method: str
    engine: str
    base_model: str  # the catalog id
    public_name: str  # base_model_name_or_path
    hub_revision: str | None
    modality: str
    dataset: dict[str, Any]  # the pinned dataset (name, version, sha256, rows)
    step: int
    snapshot: str | None
    loss: float | None
    reward: float | None
    lineage: str
    rank: int | None
    alpha: float | None
    modules: list[str]
    settings: dict[str, Any]
    description: str | None
    # The loss on the run's evaluation set at (or last before) the weights' step; None where
    # the run had none or it was not reported.
    eval_loss: float | None = None


def lineage_text(
    source_kind: str | None,
    source_run: str | None,
    source_snapshot: str | None,
    pipeline: str | None,
    stage: str | None,
) -> str:
    """Where a run's adapter comes from, in words."""
    parts = []
    if source_run:
        at = f" at snapshot `{source_snapshot}`" if source_snapshot else ""
        how = {
            "warm-start": f"warm start from the final adapter of run `{source_run}`",
            "branch": f"branch from the weights of run `{source_run}`{at}",
            "continue": f"continues run `{source_run}` from its training state{at}",
        }.get(source_kind or "", f"starts from run `{source_run}`{at}")
        parts.append(how)
    else:
        parts.append("a fresh adapter (no source run)")
    if pipeline:
        parts.append(f"stage `{stage}` of pipeline `{pipeline}`")
    return "; ".join(parts)


def published_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A run's resolved settings as a card and `training_settings.json` publish them: without
    the base model's path on the trainer's disk, which names nothing a reader has."""
    out = copy.deepcopy(dict(settings))
    base = out.get("baseModel")
    if isinstance(base, dict):
        base.pop("path", None)
    return out


def vllm_max_lora_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM accepts that serves an adapter of `rank`."""
    for value in VLLM_MAX_LORA_RANKS:
        if rank <= value:
            return value
    return VLLM_MAX_LORA_RANKS[-1]


def model_card(facts: CardFacts) -> str:
    merged = facts.kind == "merged"
    front: dict[str, Any] = {}
    if facts.public_name != facts.base_model:
        # The Hub links `base_model` to a repository: only a hub id names one.
        front["base_model"] = facts.public_name
        front["base_model_relation"] = "merge" if merged else "adapter"
    image_text = facts.modality == "image-text"
    front |= {
        "library_name": "transformers" if merged else "peft",
        "pipeline_tag": "image-text-to-text" if image_text else "text-generation",
        "tags": ["akka-training", facts.method, "lora"] + (["merged"] if merged else []),
    }
    what = (
        f"the base model `{facts.public_name}` with a LoRA adapter merged into its weights"
        if merged
        else f"a LoRA adapter for `{facts.public_name}`"
    )
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {facts.name}",
        "",
        f"This is {what}, trained by akka training (run `{facts.run_id}` of project "
        f"`{facts.project}`).",
    ]
    if facts.description:
        lines += ["", facts.description]
    if facts.modality == "image-text":
        lines += [
            "",
            "The adapter covers the language backbone only: the vision tower (and any audio "
            "tower) and the multimodal projector are the base model's, unchanged"
            + (", merged as they were." if merged else "."),
        ]
    lines += ["", "## Training", "", "| | |", "|---|---|"]
    for key, value in _rows(facts):
        lines.append(f"| {key} | {value} |")
    lines += ["", "## Use", ""] + (_use_merged(facts) if merged else _use_adapter(facts))
    lines += [
        "",
        "## Resolved settings",
        "",
        "The settings the run trained under, as `akka training runs get RUN --settings` prints "
        "them (also in `training_settings.json`):",
        "",
        "```yaml",
        yaml.safe_dump(published_settings(facts.settings), sort_keys=False, width=100).rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def _rows(facts: CardFacts) -> list[tuple[str, str]]:
    base = f"`{facts.public_name}`"
    if facts.public_name != facts.base_model:
        base += f" (catalog id `{facts.base_model}`)"
    if facts.hub_revision:
        base += f", revision `{facts.hub_revision}`"
    dataset = facts.dataset
    rows = [
        ("Base model", base),
        ("Method", f"{facts.method} on {facts.engine}"),
        (
            "Dataset",
            f"`{dataset.get('name')}` version {dataset.get('version')} "
            f"(sha256 `{dataset.get('sha256')}`, {dataset.get('rows')} rows)",
        ),
        ("Steps", str(facts.step)),
        ("Weights", f"snapshot `{facts.snapshot}`" if facts.snapshot else "the final adapter"),
    ]
    if facts.method in ("sft", "dpo"):
        rows.append(("Training loss", _figure(facts.loss)))
    else:
        rows.append(("Reward", _figure(facts.reward)))
    held_out = facts.settings.get("evalDataset")
    if isinstance(held_out, dict):
        rows.append(
            (
                "Evaluation loss",
                f"{_figure(facts.eval_loss)} on `{held_out.get('name')}` version "
                f"{held_out.get('version')} ({held_out.get('rows')} rows)",
            )
        )
    rows.append(("Lineage", facts.lineage))
    if facts.rank is not None:
        short = sorted({m.split(".")[-1] for m in facts.modules})
        covers = f", {len(facts.modules)} modules ({', '.join(short)})" if facts.modules else ""
        rows.append(("LoRA", f"rank {facts.rank}, alpha {facts.alpha:g}{covers}"))
    return rows


def _use_adapter(facts: CardFacts) -> list[str]:
    loader = (
        "AutoModelForImageTextToText" if facts.modality == "image-text" else "AutoModelForCausalLM"
    )
    max_rank = vllm_max_lora_rank(facts.rank or 8)
    return [
        *_replace(facts, "this directory (where `akka training runs download` put it)"),
        "With PEFT (the directory holds the tokenizer and chat template the run trained with):",
        "",
        "```python",
        f"from transformers import {loader}, AutoTokenizer",
        "from peft import PeftModel",
        "",
        f'base = {loader}.from_pretrained("{facts.public_name}")',
        'model = PeftModel.from_pretrained(base, "DIR")',
        'tokenizer = AutoTokenizer.from_pretrained("DIR")',
        "```",
        "",
        "With vLLM:",
        "",
        "```",
        f"vllm serve {facts.public_name} --enable-lora --lora-modules {facts.name}=DIR "
        f"--max-lora-rank {max_rank}",
        "```",
    ]


def _use_merged(facts: CardFacts) -> list[str]:
    loader = (
        "AutoModelForImageTextToText" if facts.modality == "image-text" else "AutoModelForCausalLM"
    )
    return [
        *_replace(facts, "this directory (where `akka training runs export` put it)"),
        "With transformers:",
        "",
        "```python",
        f"from transformers import {loader}, AutoTokenizer",
        "",
        f'model = {loader}.from_pretrained("DIR")',
        'tokenizer = AutoTokenizer.from_pretrained("DIR")',
        "```",
        "",
        "With vLLM: `vllm serve DIR`.",
    ]


def _replace(facts: CardFacts, directory: str) -> list[str]:
    """What a reader replaces in the snippets below: DIR, and a base model named by a catalog
    id that no Hub repository answers to."""
    said = f"Replace `DIR` with {directory} or with the Hub repository you upload it to."
    if facts.kind != "merged" and facts.public_name == facts.base_model:
        said += (
            f" `{facts.public_name}` is the base model's name in the trainer's catalog, not a "
            "Hub repository: replace it with the base model's Hub id or a directory holding "
            "its files."
        )
    return [said, ""]


def _figure(value: float | None) -> str:
    return "not reported" if value is None else f"{value:.4g}"


def public_names(model: CatalogModel | None, model_id: str) -> tuple[str, str | None]:
    """`base_model_name_or_path` and `revision` of the catalog's model (its hub id and the
    commit its files are, when given), else its catalog id."""
    if model is None:
        return model_id, None
    return model.public_name, model.hub_revision if model.hub_id else None
