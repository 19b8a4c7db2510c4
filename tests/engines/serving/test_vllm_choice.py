"""Which engine serves an endpoint (`trainer.endpoints.engine`): auto is vLLM only where the
deployment names vLLM's environment and the model suits it, transformers otherwise; a `vllm`
choice that cannot work fails the endpoint, saying why and what to change."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from akka_training.core.serving import ServeParams
from akka_training.engines.serving.vllm import VllmFailed, choose_engine, head_dim

CPU_SIZES = "32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512"


def model(tmp_path: Path, **config: Any) -> Path:
    directory = tmp_path / "model"
    directory.mkdir(exist_ok=True)
    shape = {"hidden_size": 128, "num_attention_heads": 2, "head_dim": 64}
    (directory / "config.json").write_text(json.dumps({**shape, **config}))
    return directory


def params(engine: str, python: str | None = None, modality: str = "text") -> ServeParams:
    return ServeParams.model_validate(
        {
            "endpoint": "chat",
            "baseModel": {
                "id": "tiny",
                "path": "/models/tiny",
                "revision": None,
                "modality": modality,
                "contextLength": 512,
            },
            "engine": engine,
            "vllmPython": python,
        }
    )


def refusal(p: ServeParams, directory: Path, on_gpu: bool = False) -> str:
    with pytest.raises(VllmFailed) as failed:
        choose_engine(p, directory, on_gpu=on_gpu)
    return failed.value.message


def test_transformers_is_chosen_whatever_the_model(tmp_path: Path) -> None:
    assert choose_engine(params("transformers"), model(tmp_path), on_gpu=False) == "transformers"


def test_auto_serves_with_transformers_where_the_deployment_has_no_vllm(tmp_path: Path) -> None:
    assert choose_engine(params("auto"), model(tmp_path), on_gpu=False) == "transformers"
    missing = str(tmp_path / "no-such" / "python")
    assert choose_engine(params("auto", missing), model(tmp_path), on_gpu=True) == "transformers"


def test_vllm_without_an_environment_fails_saying_what_to_set(tmp_path: Path) -> None:
    assert refusal(params("vllm"), model(tmp_path)) == (
        "trainer.endpoints.engine is vllm, but the deployment names no vLLM environment: set "
        "trainer.endpoints.vllm-python to the interpreter scripts/setup-vllm-env.sh builds "
        "(.venv-vllm/bin/python). Set trainer.endpoints.engine to auto or transformers to "
        "serve it with transformers."
    )


def test_vllm_with_an_interpreter_the_node_lacks_fails_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such" / "python")
    assert refusal(params("vllm", missing), model(tmp_path)) == (
        f"trainer.endpoints.engine is vllm, but trainer.endpoints.vllm-python names {missing}, "
        "which this node does not have: build it with scripts/setup-vllm-env.sh. Set "
        "trainer.endpoints.engine to auto or transformers to serve it with transformers."
    )


def test_vllm_with_an_interpreter_without_vllm_fails_saying_so(tmp_path: Path) -> None:
    # The trainer's own environment has no vLLM (it lives in an environment of its own).
    python = sys.executable
    assert refusal(params("vllm", python), model(tmp_path)) == (
        f"trainer.endpoints.engine is vllm, but the environment of {python} "
        "(trainer.endpoints.vllm-python) has no vLLM: build it with scripts/setup-vllm-env.sh. "
        "Set trainer.endpoints.engine to auto or transformers to serve it with transformers."
    )


def test_a_head_size_vllms_cpu_attention_refuses_keeps_a_cpu_endpoint_off_vllm(
    tmp_path: Path,
) -> None:
    narrow = model(tmp_path, hidden_size=64, num_attention_heads=4, head_dim=16)
    assert choose_engine(params("auto", sys.executable), narrow, on_gpu=False) == "transformers"
    assert refusal(params("vllm", sys.executable), narrow) == (
        "trainer.endpoints.engine is vllm, but vLLM's CPU attention does not take the head "
        f"size of tiny (16); it takes {CPU_SIZES}. Set trainer.endpoints.engine to auto or "
        "transformers to serve it with transformers."
    )


def test_an_image_text_model_is_served_with_transformers(tmp_path: Path) -> None:
    vision = params("vllm", sys.executable, modality="image-text")
    assert refusal(vision, model(tmp_path), on_gpu=True) == (
        "trainer.endpoints.engine is vllm, but the base model tiny is an image-text model; "
        "vLLM serves text models here. Set trainer.endpoints.engine to auto or transformers to "
        "serve it with transformers."
    )


def test_the_head_size_is_read_or_implied_by_the_config(tmp_path: Path) -> None:
    assert head_dim(model(tmp_path)) == 64
    implied = tmp_path / "implied"
    implied.mkdir()
    (implied / "config.json").write_text(
        json.dumps({"text_config": {"hidden_size": 512, "num_attention_heads": 4}})
    )
    assert head_dim(implied) == 128
    assert head_dim(tmp_path / "nothing") is None
