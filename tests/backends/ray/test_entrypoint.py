"""How a job travels to a Ray worker: submission ids, the entrypoint command, the spec in the
runtime environment."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from akka_training.backends.ray.entrypoint import (
    BOOTSTRAP_MODULE,
    MAX_SPEC_CHARS,
    SPEC_ENV,
    SpecTooLarge,
    decode_spec,
    encode_spec,
    entrypoint,
    is_cpu_pool,
    runtime_env,
    submission_id,
)


def test_the_same_run_and_attempt_always_get_the_same_submission_id() -> None:
    assert submission_id("r-abc", 2) == submission_id("r-abc", 2) == "akka-r-abc-2"
    assert submission_id("r-abc", 3) != submission_id("r-abc", 2)


def test_the_entrypoint_execs_the_bootstrap_with_the_absolute_interpreter() -> None:
    command = entrypoint(
        "/opt/venv/bin/python", "akka_training.engines.job", "r-1", 4, "/data/jobs"
    )
    assert command.startswith("exec ")
    assert shlex.split(command)[1:] == [
        "/opt/venv/bin/python",
        "-m",
        BOOTSTRAP_MODULE,
        "--entry",
        "akka_training.engines.job",
        "--run",
        "r-1",
        "--attempt",
        "4",
        "--work-dir",
        "/data/jobs",
    ]


def test_an_interpreter_path_with_spaces_stays_one_word() -> None:
    command = entrypoint("/opt/my env/bin/python", "m", "r", 1)
    assert shlex.split(command)[1] == "/opt/my env/bin/python"
    assert "--work-dir" not in command


def test_the_spec_round_trips_and_is_compressed() -> None:
    spec = {"runId": "r-1", "attempt": 1, "settings": {"config": {"x": "y" * 5000}}}
    encoded = encode_spec(spec)
    assert decode_spec(encoded) == spec
    assert len(encoded) < 1000  # repetitive JSON compresses well


def test_a_spec_that_does_not_fit_in_the_environment_is_refused() -> None:
    noise = "".join(f"{i * 7919 % 1000003:x}" for i in range(60_000))
    with pytest.raises(SpecTooLarge, match=str(MAX_SPEC_CHARS)):
        encode_spec({"noise": noise})


def test_the_job_env_goes_over_the_deployment_runtime_env() -> None:
    base: dict[str, Any] = {
        "env_vars": {"HF_HOME": "/cache", "AKKA_JOB_BOOTSTRAP": "old"},
        "image_uri": "img:1",
    }
    env = runtime_env(base, {"AKKA_JOB_BOOTSTRAP": "t"}, "SPEC", cpu_only=False)
    assert env == {
        "env_vars": {"HF_HOME": "/cache", "AKKA_JOB_BOOTSTRAP": "t", SPEC_ENV: "SPEC"},
        "image_uri": "img:1",
    }
    assert base["env_vars"]["AKKA_JOB_BOOTSTRAP"] == "old"  # the settings are not modified


def test_a_cpu_job_sees_no_gpu() -> None:
    env = runtime_env(None, {}, "SPEC", cpu_only=True)
    assert env["env_vars"]["CUDA_VISIBLE_DEVICES"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in runtime_env(None, {}, "SPEC", cpu_only=False)["env_vars"]


def test_env_vars_that_are_not_a_mapping_are_left_for_ray_to_refuse() -> None:
    env = runtime_env({"env_vars": ["A=1"]}, {"AKKA_JOB_BOOTSTRAP": "t"}, "SPEC", cpu_only=False)
    assert env["env_vars"] == ["A=1"]


@pytest.mark.parametrize(("accelerator", "cpu"), [("cpu", True), (" CPU ", True), ("H100", False)])
def test_cpu_pools_are_named_by_their_accelerator(accelerator: str, cpu: bool) -> None:
    assert is_cpu_pool(accelerator) is cpu
