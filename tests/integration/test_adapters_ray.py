"""The merge task on the Ray backend: a job submitted through Ray's job API like a run's
attempt, with its own spec and token and no devices; its result downloads like an adapter, and
where the Ray node cannot read the base model the task fails saying so."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.integration.helpers import (
    ensure_project,
    register_dataset,
    sft_plan,
    start_run,
    wait_phase,
)
from tests.integration.test_ray_backend import ray_jobs, ray_settings
from tests.ray_cluster import RayHead

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_merge_runs_as_a_ray_job_and_its_model_downloads(
    trainer_factory: Any, ray_head: RayHead, dev_models: Path, tmp_path: Path
) -> None:
    settings = ray_settings(ray_head, dev_models_dir=str(dev_models))
    del settings["trainer"]["testing"], settings["trainer"]["catalog"]
    settings["trainer"]["ray"].pop("runtime-env")
    trainer = trainer_factory(settings)
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    done = wait_phase(trainer, run, "COMPLETED", "FAILED", timeout=240)
    assert done.phase == "COMPLETED", trainer.cli("training", "runs", "logs", run).stdout
    dest = tmp_path / "merged"

    exported = trainer.cli_json("training", "runs", "export", run, "--merged", "-d", str(dest))

    task = exported["task"]
    info = ray_jobs(ray_head).get_job_info(f"akka-{task}-1")
    assert " --entry akka_training.engines.tasks.job " in info.entrypoint
    env_vars = info.runtime_env["env_vars"]
    assert {"AKKA_TASK_BOOTSTRAP", "AKKA_JOB_SPEC"} <= set(env_vars)
    assert "AKKA_JOB_BOOTSTRAP" not in env_vars and env_vars["CUDA_VISIBLE_DEVICES"] == ""
    assert trainer.cli_json("training", "capacity")["claims"] == []  # it held no devices
    base = AutoModelForCausalLM.from_pretrained(dev_models / "tiny-chat")
    adapter = PeftModel.from_pretrained(base, str(trainer.home / "blobs" / done.results.model))
    ids = AutoTokenizer.from_pretrained(dest)("What is 2 + 3?", return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(
            AutoModelForCausalLM.from_pretrained(dest)(**ids).logits, adapter(**ids).logits
        )


def test_a_merge_where_the_ray_node_has_no_base_model_fails_saying_so(
    trainer_factory: Any, ray_head: RayHead, tmp_path: Path
) -> None:
    # The scripted job trains nothing, on a catalog whose model lies at /nonexistent/tiny-chat:
    # the service cannot see the Ray node's disk, so the merge's job finds out there.
    trainer = trainer_factory(ray_settings(ray_head))
    ensure_project(trainer, "maths")
    register_dataset(trainer, "maths/train")
    run = start_run(trainer, sft_plan("maths", "maths/train", steps=2))
    wait_phase(trainer, run, "COMPLETED", timeout=90)

    refused = trainer.cli(
        "training", "runs", "export", run, "--merged", "-d", str(tmp_path / "m"), check=False
    )

    assert refused.returncode == 1
    *followed, last = refused.stderr.splitlines()
    assert followed[0].endswith(": PENDING") and followed[-1].endswith(": FAILED")
    found = re.fullmatch(r"error: The merge of run \w+ FAILED \(task (tk\w+)\): (.*)", last)
    assert found is not None, refused.stderr
    assert found.group(2) == (
        f"The base model tiny-chat's weights are not available to the training cluster (node "
        f"{socket.gethostname()} has no model at /nonexistent/tiny-chat), so the adapter cannot "
        f"be merged into it there. Download the adapter instead (`akka training runs download "
        f"{run}`) and merge it where the base model is, or make the model's directory readable "
        "on the cluster's nodes."
    )
    assert not (tmp_path / "m").exists()
    task = trainer.cli_json("training", "tasks", "get", found.group(1))
    assert (task["state"], task["kind"], task["run"]) == ("FAILED", "merge", run)
