from pathlib import Path

import pytest

from akka_training.config.settings import SettingsError, load_settings


def test_defaults_are_the_embedded_trainer(tmp_path: Path) -> None:
    settings = load_settings(None, env={"AKKA_HOME": str(tmp_path)})
    assert settings.trainer.reinforcement.engine == "trl"
    assert settings.trainer.backend == "local"
    assert settings.trainer.datasets.max_bytes == 256 * 1024 * 1024
    assert settings.trainer_url == "http://127.0.0.1:9001"


def test_a_bad_setting_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("trainer:\n  datasets:\n    max-bytes: lots\n  reinforcment: {}\n")
    with pytest.raises(SettingsError) as err:
        load_settings(path, env={})
    assert "trainer.datasets.max-bytes" in err.value.message
    assert "trainer.reinforcment: not a known setting" in err.value.message


def test_environment_overrides_a_key(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("trainer:\n  reinforcement: {engine: trl}\n")
    settings = load_settings(
        path,
        env={
            "AKKA_TRAINER__REINFORCEMENT__ENGINE": "verl",
            "AKKA_TRAINER__DATASETS__MAX_BYTES": "1024",
            "AKKA_TRAINER__REINFORCEMENT__IMAGE_TEXT": "true",
        },
    )
    assert settings.trainer.reinforcement.engine == "verl"
    assert settings.trainer.reinforcement.image_text is True
    assert settings.trainer.datasets.max_bytes == 1024


def test_catalog_entries_are_kebab_case_too(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "trainer:\n  catalog:\n    - id: m\n      path: /m\n      context-length: 512\n"
        "      envelopes:\n        - {method: sft, engine: trl, gpus: 1, host-memory-gib: 8}\n"
    )
    settings = load_settings(path, env={})
    assert settings.trainer.catalog is not None
    model = settings.trainer.catalog[0]
    assert model.context_length == 512
    assert model.envelopes[0].host_memory_gib == 8
