"""Adapters out, on real runs of the development models through the real service and CLI:
`runs download` after SFT and after GRPO (and of a snapshot, and of an image-text run), loaded
with PEFT onto the base model to logits identical to the adapter the job wrote; the adapter
config checked against vLLM's LoRA rules; `runs export --merged` as a merge task on the local
backend whose model gives the adapter's logits; the Python client; the refusals in their words."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
)

from akka_training.testing.service import TrainerProcess
from tests.integration.helpers import ensure_project, register_dataset, write_plan
from tests.integration.test_training import EXAMPLES, IMAGE_ROWS, rl_plan, sft_plan

pytestmark = pytest.mark.slow

PROMPT = "What is 2 + 3?"
# vLLM's largest `max_lora_rank` (vllm.config.lora), and the parts of a multimodal model that
# are not its language model.
VLLM_MAX_LORA_RANK = 512
TOWERS = {"vision_tower", "vision_model", "audio_tower", "multi_modal_projector", "visual"}
LORA_KEY = re.compile(r"base_model\.model\.(.+)\.lora_[AB]\.weight")


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory, dev_models: Path) -> Any:
    t = TrainerProcess(
        tmp_path_factory.mktemp("adapters"),
        {"trainer": {"dev-models-dir": str(dev_models), "controller": {"interval-seconds": 0.2}}},
    ).start()
    ensure_project(t, "demo")
    for name in ("arithmetic", "arithmetic-prompts"):
        path = str(EXAMPLES / f"{name}.jsonl")
        t.cli("training", "datasets", "register", f"demo/{name}", "-f", path)
    register_dataset(t, "demo/pictures", IMAGE_ROWS)
    yield t
    t.close()


def finished(trainer: TrainerProcess, plan: dict[str, Any], name: str) -> dict[str, Any]:
    path = write_plan(trainer, plan, f"plan-{name}.yaml")
    run_id = trainer.cli_json("training", "runs", "start", "-f", str(path))["id"]
    trainer.cli("training", "runs", "wait", run_id, timeout=600)
    return dict(trainer.cli_json("training", "runs", "get", run_id))


@pytest.fixture(scope="module")
def sft_run(trainer: TrainerProcess) -> dict[str, Any]:
    run = finished(trainer, {**sft_plan(), "modelName": "arith-sft"}, "sft")
    assert run["phase"] == "COMPLETED", run["failure"]
    return run


@pytest.fixture(scope="module")
def grpo_run(trainer: TrainerProcess) -> dict[str, Any]:
    run = finished(trainer, rl_plan("grpo"), "grpo")
    assert run["phase"] == "COMPLETED", run["failure"]
    return run


def base_model(dev_models: Path, name: str = "tiny-chat") -> torch.nn.Module:
    loader = AutoModelForImageTextToText if name == "tiny-vision" else AutoModelForCausalLM
    model: torch.nn.Module = loader.from_pretrained(dev_models / name).eval()
    return model


def logits(model: torch.nn.Module, dev_models: Path) -> torch.Tensor:
    ids = AutoTokenizer.from_pretrained(dev_models / "tiny-chat")(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out: torch.Tensor = model(**ids).logits
    return out


def with_adapter(dev_models: Path, directory: Path) -> torch.nn.Module:
    return PeftModel.from_pretrained(base_model(dev_models), str(directory)).eval()


def stored(trainer: TrainerProcess, key: str) -> Path:
    """A directory of the blob store: what the job wrote."""
    return trainer.home / "blobs" / key


def download(trainer: TrainerProcess, run_id: str, dest: Path, *args: str) -> dict[str, Any]:
    written: dict[str, Any] = trainer.cli_json(
        "training", "runs", "download", run_id, "-d", str(dest), *args
    )
    return written


def assert_vllm_accepts(directory: Path, base: torch.nn.Module) -> None:
    """vLLM's LoRA rules, as far as they can be checked without vLLM (vllm/lora/peft_helper.py
    and lora_model.py): a positive rank within `max_lora_rank`'s range, no DoRA, no LoRA bias,
    no `modules_to_save`, bias "none", a plain initialisation, and weights only on linear layers
    of the language model, named as vLLM parses them."""
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    rank = config["r"]
    assert isinstance(rank, int) and 1 <= rank <= VLLM_MAX_LORA_RANK
    assert all(1 <= r <= VLLM_MAX_LORA_RANK for r in (config.get("rank_pattern") or {}).values())
    assert not config.get("modules_to_save")
    assert config.get("bias", "none") == "none"
    assert not config.get("use_dora") and not config.get("lora_bias")
    assert config.get("init_lora_weights", True) in (True, "gaussian")
    linear = {
        name
        for name, module in base.named_modules()
        if isinstance(module, torch.nn.Linear)
        and not set(name.split(".")) & TOWERS
        and name.split(".")[-1] != "lm_head"
    }
    targets = config["target_modules"]
    assert isinstance(targets, list) and targets and set(targets) <= linear
    with safe_open(directory / "adapter_model.safetensors", "pt") as f:
        keys = list(f.keys())
    adapted = set()
    for key in keys:
        match = LORA_KEY.fullmatch(key)
        assert match is not None, key
        adapted.add(match.group(1))
    assert adapted <= linear and adapted == set(targets)
    # The card says which --max-lora-rank serves it.
    served = re.search(r"--max-lora-rank (\d+)", (directory / "README.md").read_text())
    assert served is not None and rank <= int(served.group(1))


def test_an_sft_adapter_downloads_in_the_layout_peft_loads_to_the_jobs_logits(
    trainer: TrainerProcess, sft_run: dict[str, Any], dev_models: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "arith-sft"

    written = download(trainer, sft_run["id"], dest)

    assert sorted(p.name for p in dest.iterdir()) == sorted(f["path"] for f in written["files"])
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= {
        f["path"] for f in written["files"]
    }
    assert (written["run"], written["kind"], written["step"], written["directory"]) == (
        sft_run["id"],
        "adapter",
        8,
        str(dest),
    )
    config = json.loads((dest / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny-chat"
    job_wrote = stored(trainer, sft_run["results"]["model"])
    downloaded = logits(with_adapter(dev_models, dest), dev_models)
    assert torch.equal(downloaded, logits(with_adapter(dev_models, job_wrote), dev_models))
    assert not torch.allclose(downloaded, logits(base_model(dev_models), dev_models))
    # The tokenizer and chat template the run trained with load from the same directory.
    ours = AutoTokenizer.from_pretrained(dest)
    base = AutoTokenizer.from_pretrained(dev_models / "tiny-chat")
    assert ours(PROMPT)["input_ids"] == base(PROMPT)["input_ids"]
    assert ours.chat_template == base.chat_template
    # The run's settings as the trainer resolved them, less the base model's path on its disk.
    settings = copy.deepcopy(sft_run["settings"])
    del settings["baseModel"]["path"]
    assert json.loads((dest / "training_settings.json").read_text()) == settings
    card = (dest / "README.md").read_text()
    assert "| Steps | 8 |" in card and "| Method | sft on trl |" in card
    assert f"| Training loss | {sft_run['results']['trainingLoss']:.4g} |" in card
    assert_vllm_accepts(dest, base_model(dev_models))


def test_a_non_empty_directory_is_refused_unless_forced(
    trainer: TrainerProcess, sft_run: dict[str, Any], tmp_path: Path
) -> None:
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")

    refused = trainer.cli(
        "training", "runs", "download", sft_run["id"], "-d", str(dest), check=False
    )

    assert refused.returncode == 1
    assert refused.stderr == (
        f"error: {dest} is not empty: give another directory with -d, or add --force to write "
        "over the files of the same names.\n"
    )
    assert sorted(p.name for p in dest.iterdir()) == ["notes.txt"]
    forced = trainer.cli("training", "runs", "download", sft_run["id"], "-d", str(dest), "--force")
    assert f"to {dest}:" in forced.stdout and "every sha256 checked" in forced.stdout
    assert (dest / "notes.txt").read_text() == "mine" and (dest / "adapter_config.json").is_file()


def test_a_snapshot_downloads_with_its_own_weights(
    trainer: TrainerProcess, sft_run: dict[str, Any], dev_models: Path, tmp_path: Path
) -> None:
    written = download(trainer, sft_run["id"], tmp_path / "s", "--snapshot", "step-4")

    assert (written["snapshot"], written["step"]) == ("step-4", 4)
    snapshot = stored(trainer, f"runs/{sft_run['id']}/snapshots/step-4/weights")
    final = stored(trainer, sft_run["results"]["model"])
    at_step_4 = logits(with_adapter(dev_models, tmp_path / "s"), dev_models)
    assert torch.equal(at_step_4, logits(with_adapter(dev_models, snapshot), dev_models))
    assert not torch.equal(at_step_4, logits(with_adapter(dev_models, final), dev_models))
    assert "| Weights | snapshot `step-4` |" in (tmp_path / "s" / "README.md").read_text()


def test_a_grpo_adapter_downloads_and_loads_to_the_jobs_logits(
    trainer: TrainerProcess, grpo_run: dict[str, Any], dev_models: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "grpo"

    download(trainer, grpo_run["id"], dest)

    job_wrote = stored(trainer, grpo_run["results"]["model"])
    assert torch.equal(
        logits(with_adapter(dev_models, dest), dev_models),
        logits(with_adapter(dev_models, job_wrote), dev_models),
    )
    card = (dest / "README.md").read_text()
    assert "| Method | grpo on trl |" in card and "| Reward |" in card
    assert "demo/arithmetic-prompts" in card
    assert_vllm_accepts(dest, base_model(dev_models))


def test_the_merged_export_gives_the_logits_of_the_adapter_on_the_base(
    trainer: TrainerProcess, sft_run: dict[str, Any], dev_models: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "merged"

    exported = trainer.cli(
        "training", "runs", "export", sft_run["id"], "--merged", "-d", str(dest), timeout=600
    )

    assert f"Wrote the final merged model of run {sft_run['id']} (step 8) to {dest}" in (
        exported.stdout
    )
    assert re.search(r"merge tk\w+: SUCCEEDED", exported.stderr), exported.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= {
        p.name for p in dest.iterdir()
    }
    merged = AutoModelForCausalLM.from_pretrained(dest).eval()
    adapter = with_adapter(dev_models, stored(trainer, sft_run["results"]["model"]))
    torch.testing.assert_close(logits(merged, dev_models), logits(adapter, dev_models))
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert (
        AutoTokenizer.from_pretrained(dest)(PROMPT)["input_ids"]
        == AutoTokenizer.from_pretrained(dev_models / "tiny-chat")(PROMPT)["input_ids"]
    )
    # Asked again, the merge done is reused: the same task, no second job.
    again = trainer.cli_json(
        "training", "runs", "export", sft_run["id"], "--merged", "-d", str(tmp_path / "again")
    )
    tasks = trainer.cli_json("training", "tasks", "list", "--run", sft_run["id"])
    assert [t["id"] for t in tasks if t["result"]] == [again["task"]]
    assert tasks[0]["state"] == "SUCCEEDED" and tasks[0]["kind"] == "merge"


def test_the_python_client_downloads_and_exports(
    trainer: TrainerProcess,
    sft_run: dict[str, Any],
    dev_models: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    updates: list[str] = []
    with trainer.client() as client:
        adapter = client.download_adapter(sft_run["id"])
        merged = client.export_merged(
            sft_run["id"], snapshot="step-4", on_update=lambda t: updates.append(t.state)
        )

    assert adapter.directory == str(tmp_path / "arith-sft")
    assert merged.directory == str(tmp_path / "arith-sft-step-4-merged")
    assert updates[-1] == "SUCCEEDED" and merged.task is not None
    snapshot = stored(trainer, f"runs/{sft_run['id']}/snapshots/step-4/weights")
    torch.testing.assert_close(
        logits(AutoModelForCausalLM.from_pretrained(merged.directory).eval(), dev_models),
        logits(with_adapter(dev_models, snapshot), dev_models),
    )


def test_an_image_text_adapter_covers_the_language_backbone_and_its_card_says_so(
    trainer: TrainerProcess, dev_models: Path, tmp_path: Path
) -> None:
    plan = sft_plan(steps=2, dataset="demo/pictures")
    run = finished(trainer, {**plan, "baseModel": "tiny-vision"}, "vision")
    assert run["phase"] == "COMPLETED", run["failure"]
    dest = tmp_path / "vision"

    download(trainer, run["id"], dest)

    card = (dest / "README.md").read_text()
    assert (
        "The adapter covers the language backbone only: the vision tower (and any audio tower) "
        "and the multimodal projector are the base model's, unchanged." in card
    )
    assert "pipeline_tag: image-text-to-text" in card
    base = base_model(dev_models, "tiny-vision")
    assert_vllm_accepts(dest, base)
    assert (dest / "processor_config.json").is_file()
    assert AutoProcessor.from_pretrained(dest).tokenizer.chat_template is not None
    PeftModel.from_pretrained(base, str(dest))


def test_refusals_through_the_cli(
    trainer: TrainerProcess, sft_run: dict[str, Any], tmp_path: Path
) -> None:
    # Every row dropped: the run fails before its first save.
    failed = finished(trainer, sft_plan(steps=2, maxSeqLength=16), "dropped")
    assert failed["phase"] == "FAILED"
    refused = trainer.cli("training", "runs", "download", failed["id"], check=False)
    assert refused.returncode == 1
    assert refused.stderr == (
        f"error: Run {failed['id']} has no adapter: it FAILED before its first save "
        f"({failed['failure']['firstLine']}).\n"
    )
    no_flag = trainer.cli("training", "runs", "export", sft_run["id"], check=False)
    assert no_flag.stderr == (
        "error: runs export writes a merged model: add --merged (`akka training runs download` "
        "gives the adapter itself).\n"
    )
    a_file = tmp_path / "file"
    a_file.write_text("x")
    into_file = trainer.cli(
        "training", "runs", "download", sft_run["id"], "-d", str(a_file), check=False
    )
    assert into_file.stderr == f"error: {a_file} is a file; give a directory with -d.\n"
    missing = trainer.cli(
        "training", "runs", "download", sft_run["id"], "--snapshot", "step-5", check=False
    )
    assert missing.stderr == (
        f"error: Run {sft_run['id']} has no snapshot 'step-5'; its snapshots: step-4, step-8.\n"
    )
