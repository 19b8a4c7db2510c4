"""The spine through the real service and the real CLI."""

from __future__ import annotations

import os
import stat
from typing import Any

import pytest
import yaml

from akka_training.core.errors import Forbidden

# Every test here talks to trainer processes through the real CLI.
pytestmark = pytest.mark.slow

CATALOG = [
    {
        "id": "qwen-test",
        "path": "/models/qwen-test",
        "revision": "abc123",
        "context-length": 4096,
        "envelopes": [
            {
                "method": "sft",
                "engine": "trl",
                "gpus": 1,
                "precision": "BF16",
                "gpu-memory-gib": 20,
                "host-memory-gib": 32,
            },
            {
                "method": "grpo",
                "engine": "verl",
                "gpus": 1,
                "gpu-memory-gib": 40,
                "host-memory-gib": 64,
            },
            {
                "method": "grpo",
                "engine": "verl",
                "gpus": 4,
                "gpu-memory-gib": 40,
                "host-memory-gib": 128,
            },
        ],
    },
    {
        "id": "vision-test",
        "path": "/models/vision-test",
        "modality": "image-text",
        "envelopes": [
            {"method": "sft", "engine": "trl", "gpus": 1},
            {"method": "grpo", "engine": "trl", "gpus": 1},
            {"method": "gspo", "engine": "trl", "gpus": 1},
            {"method": "grpo", "engine": "verl", "gpus": 1},
        ],
    },
]


def settings(**trainer: Any) -> dict[str, Any]:
    return {
        "trainer": {
            "catalog": CATALOG,
            "pools": [
                {
                    "name": "training",
                    "accelerator": "cpu",
                    "devices": 4,
                    "max-claim": 2,
                    "host-ram-gib": 64,
                }
            ],
            **trainer,
        }
    }


@pytest.fixture(scope="module")
def verl_trainer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from akka_training.testing.service import TrainerProcess

    trainer = TrainerProcess(
        tmp_path_factory.mktemp("spine"), settings(reinforcement={"engine": "verl"})
    ).start()
    yield trainer
    trainer.close()


def test_first_start_writes_the_admin_token_and_a_local_context(verl_trainer: Any) -> None:
    token_file = verl_trainer.home / "admin-token"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    config = yaml.safe_load(verl_trainer.config_path.read_text())
    assert config["current-context"] == "local"
    assert config["contexts"]["local"]["login"] == verl_trainer.admin_token
    assert stat.S_IMODE(os.stat(verl_trainer.config_path).st_mode) == 0o600


def test_info_shows_the_configured_engine(verl_trainer: Any) -> None:
    out = verl_trainer.cli("training", "info").stdout
    rows = dict(line.split(None, 1) for line in out.strip().splitlines())
    assert rows["Engine"].strip() == "verl"
    assert rows["Backend"].strip() == "local"
    # SFT and DPO train on TRL even where reinforcement runs on verl.
    assert rows["Methods"].strip() == "sft on trl, dpo on trl, grpo on verl, gspo on verl"
    for row in ("Version", "Database", "Storage", "Telemetry", "Startup"):
        assert row in rows
    assert verl_trainer.cli_json("training", "info")["engine"] == "verl"


def test_capacity_shows_the_pool_and_its_max_claim(verl_trainer: Any) -> None:
    out = verl_trainer.cli("training", "capacity").stdout
    assert "Pools:" in out and "Claims:" in out and "Projects:" in out
    header, row = [line.split("   ") for line in out.splitlines()[1:3]]
    cells = dict(
        zip(
            [h.strip() for h in header if h.strip()],
            [c.strip() for c in row if c.strip()],
            strict=True,
        )
    )
    assert cells["POOL"] == "training"
    assert cells["MAX CLAIM"] == "2"
    assert cells["DECLARED"] == "4"
    assert cells["HOST RAM"] == "64 GiB"
    data = verl_trainer.cli_json("training", "capacity")
    pool = data["pools"][0]
    assert pool["free"] + pool["granted"] + pool["outside"] == pool["declared"]


def test_base_models_get_lists_admitted_runs_and_methods_per_engine(verl_trainer: Any) -> None:
    out = verl_trainer.cli("training", "base-models", "get", "qwen-test").stdout
    assert "Runs this deployment admits:" in out
    assert "GPU MEMORY PER GPU" in out and "HOST MEMORY PER NODE" in out
    data = verl_trainer.cli_json("training", "base-models", "get", "qwen-test")
    assert sorted((e["method"], e["engine"], e["gpus"]) for e in data["admitted"]) == [
        ("grpo", "verl", 1),
        ("grpo", "verl", 4),
        ("sft", "trl", 1),
    ]
    vision = verl_trainer.cli_json("training", "base-models", "get", "vision-test")
    # Under verl, RL over an image-text model needs trainer.reinforcement.image-text.
    assert vision["methods"] == ["sft"]
    assert vision["methodsByEngine"]["trl"] == ["sft", "grpo", "gspo"]
    listed = {
        m["id"]: m["methods"] for m in verl_trainer.cli_json("training", "base-models", "list")
    }
    assert listed == {"qwen-test": ["sft", "grpo"], "vision-test": ["sft"]}


def test_image_text_rl_under_verl_when_the_deployment_enables_it(trainer_factory: Any) -> None:
    trainer = trainer_factory(settings(reinforcement={"engine": "verl", "image-text": True}))
    vision = trainer.cli_json("training", "base-models", "get", "vision-test")
    assert vision["methods"] == ["sft", "grpo"]


def test_a_project_token_cannot_read_another_project(verl_trainer: Any) -> None:
    admin = verl_trainer.client()
    admin.create_project("alpha", quota=2)
    admin.create_project("beta", quota=None)
    secret = admin.create_token("alpha-ci", ["alpha"]).token
    with verl_trainer.client(secret) as alpha:
        assert alpha.project("alpha").quota == 2
        with pytest.raises(Forbidden):
            alpha.project("beta")
        assert [p.name for p in alpha.projects()] == ["alpha"]
    result = verl_trainer.cli(
        "training", "projects", "get", "beta", env={"AKKA_ACCESS_TOKEN": secret}, check=False
    )
    assert result.returncode == 5  # the credentials were refused
    assert "no access to project 'beta'" in result.stderr
    assert "Traceback" not in result.stderr


def test_requests_without_a_token_are_refused(verl_trainer: Any) -> None:
    import httpx

    assert httpx.get(f"{verl_trainer.url}/healthz").status_code == 200
    response = httpx.get(f"{verl_trainer.url}/v1/info")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_an_unknown_context_lists_the_known_ones(verl_trainer: Any) -> None:
    result = verl_trainer.cli("--context", "nope", "training", "info", check=False)
    assert result.returncode == 1
    assert "There is no context 'nope'" in result.stderr
    assert "local" in result.stderr
    result = verl_trainer.cli("training", "info", env={"AKKA_CONTEXT": "nope"}, check=False)
    assert result.returncode == 1 and "the file holds: local" in result.stderr


def test_access_token_variable_beats_the_login(verl_trainer: Any) -> None:
    admin = verl_trainer.client()
    admin.create_project("gamma", quota=None)
    secret = admin.create_token("gamma-bot", ["gamma"]).token
    as_login = verl_trainer.cli_json("auth", "current-login")
    assert as_login["kind"] == "access" and as_login["projects"] is None
    assert as_login["credential"] == "context local"
    as_env = verl_trainer.cli_json("auth", "current-login", env={"AKKA_ACCESS_TOKEN": secret})
    assert as_env["credential"] == "AKKA_ACCESS_TOKEN"
    assert as_env["projects"] == ["gamma"]


def test_a_context_on_another_api_host_exchanges_there(
    verl_trainer: Any, trainer_factory: Any
) -> None:
    other = trainer_factory(settings())
    # A second context whose API host is the other trainer, with that trainer's login.
    verl_trainer.cli("config", "set-context", "other", "--api-host", other.url)
    verl_trainer.cli(
        "auth", "login", "--name", "other", "--token", other.admin_token, "--context", "other"
    )
    info = verl_trainer.cli_json("--context", "other", "training", "info")
    assert info["engine"] == "trl"
    assert verl_trainer.cli_json("training", "info")["engine"] == "verl"
    contexts = {c["name"] for c in verl_trainer.cli_json("config", "get-contexts")}
    assert contexts == {"local", "other"}


def test_tokens_create_list_revoke(verl_trainer: Any) -> None:
    admin = verl_trainer.client()
    admin.create_project("delta", quota=1)
    created = verl_trainer.cli_json("auth", "tokens", "create", "delta-ci", "--project", "delta")
    listed = verl_trainer.cli_json("auth", "tokens", "list")
    assert created["id"] in {t["id"] for t in listed}
    verl_trainer.cli("auth", "tokens", "revoke", created["id"])
    result = verl_trainer.cli(
        "training", "info", env={"AKKA_ACCESS_TOKEN": created["token"]}, check=False
    )
    assert result.returncode == 5 and "revoked" in result.stderr


def test_info_exits_non_zero_when_the_service_is_down(trainer_factory: Any) -> None:
    trainer = trainer_factory(settings())
    trainer.stop()
    result = trainer.cli(
        "training",
        "info",
        "--trainer-url",
        trainer.url,
        env={"AKKA_ACCESS_TOKEN": "x"},
        check=False,
    )
    assert result.returncode == 3  # the trainer could not be reached
    assert result.stderr.strip().startswith("error: The trainer at")
    assert "Traceback" not in result.stderr


def test_a_cached_access_token_the_trainer_forgot_is_exchanged_again(trainer_factory: Any) -> None:
    trainer = trainer_factory(settings())
    assert trainer.cli_json("training", "info")["engine"] == "trl"
    cache = trainer.config_path.with_name(trainer.config_path.stem + ".tokens.yaml")
    data = yaml.safe_load(cache.read_text())
    data["local"]["accessToken"] = "akka_forgotten"
    cache.write_text(yaml.safe_dump(data))
    assert trainer.cli_json("training", "info")["engine"] == "trl"
    assert yaml.safe_load(cache.read_text())["local"]["accessToken"] != "akka_forgotten"
