"""How a TRL reinforcement run generates: vLLM colocate on a GPU with vLLM, transformers'
generate everywhere else; a deployment that asks for vLLM where there is none is told how."""

from __future__ import annotations

import pytest

from akka_training.core.resolved import Generation, JobSpec
from akka_training.engines.failures import JobStartFailed
from akka_training.engines.trl.generation import generation_args, uses_vllm


def test_a_gpu_job_with_vllm_generates_in_trls_colocate_mode_with_the_deployments_settings() -> (
    None
):
    generation = Generation(engine="auto", vllm_gpu_memory_utilization=0.45, vllm_sleep_mode=True)

    args = generation_args(generation, cuda=True, vllm_present=True, max_model_length=1024)

    assert args == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.45,
        "vllm_enable_sleep_mode": True,
        "vllm_max_model_length": 1024,
        "vllm_tensor_parallel_size": 1,
    }


def test_sleep_mode_can_be_turned_off() -> None:
    generation = Generation(engine="vllm", vllm_sleep_mode=False)

    args = generation_args(generation, cuda=True, vllm_present=True, max_model_length=512)

    assert args["vllm_enable_sleep_mode"] is False
    assert args["vllm_gpu_memory_utilization"] == 0.3


@pytest.mark.parametrize("engine", ["auto", "hf"])
def test_a_cpu_job_generates_as_before_unless_the_deployment_says_vllm(engine: str) -> None:
    generation = Generation(engine=engine)  # type: ignore[arg-type]

    assert generation_args(generation, cuda=False, vllm_present=True, max_model_length=512) == {
        "use_vllm": False
    }


def test_a_cpu_job_told_to_use_vllm_runs_colocate_without_sleep_mode() -> None:
    generation = Generation(engine="vllm", vllm_sleep_mode=True)

    args = generation_args(generation, cuda=False, vllm_present=True, max_model_length=256)

    assert args["use_vllm"] is True
    assert args["vllm_mode"] == "colocate"
    assert args["vllm_enable_sleep_mode"] is False


def test_hf_keeps_transformers_generate_on_a_gpu_with_vllm() -> None:
    assert not uses_vllm(Generation(engine="hf"), cuda=True, vllm_present=True)


def test_auto_on_a_gpu_without_vllm_keeps_transformers_generate() -> None:
    assert not uses_vllm(Generation(engine="auto"), cuda=True, vllm_present=False)


@pytest.mark.parametrize("cuda", [True, False])
def test_asking_for_vllm_without_it_is_refused_with_what_to_do(cuda: bool) -> None:
    with pytest.raises(JobStartFailed) as refused:
        uses_vllm(Generation(engine="vllm"), cuda=cuda, vllm_present=False)

    assert str(refused.value) == (
        "trainer.reinforcement.trl-generation is vllm, but the job's Python environment has no "
        "vLLM: build one with scripts/setup-vllm-env.sh --gpu and run the trainer from it, or "
        "set trl-generation to auto or hf"
    )


def test_a_job_spec_without_generation_settings_reads_with_their_defaults() -> None:
    assert JobSpec.model_fields["generation"].default_factory is Generation
    assert Generation().model_dump() == {
        "engine": "auto",
        "vllm_gpu_memory_utilization": 0.3,
        "vllm_sleep_mode": True,
    }
