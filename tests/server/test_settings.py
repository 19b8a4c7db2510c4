import os
from pathlib import Path

import pytest

from akka_training.config.settings import SettingsError, load_settings


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without the outer environment's overrides."""
    for name in list(os.environ):
        if name.upper().startswith("AKKA_TRAINER"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_embedded_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKKA_HOME", str(tmp_path))
    settings = load_settings(None)
    assert settings.trainer.reinforcement.engine == "trl"
    assert settings.trainer.backend == "local"
    assert settings.trainer.datasets.max_bytes == 256 * 1024 * 1024
    assert settings.trainer_url == "http://127.0.0.1:9001"
    assert settings.home == tmp_path.resolve()


def test_a_bad_setting_names_its_key(tmp_path: Path) -> None:
    path = write(tmp_path, "trainer:\n  datasets:\n    max-bytes: lots\n  reinforcment: {}\n")
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert "trainer.datasets.max-bytes" in err.value.message
    assert "trainer.reinforcment: not a known setting" in err.value.message
    assert err.value.message.startswith(f"Bad setting in {path}:\n")


def test_a_settings_file_that_cannot_be_read_says_why(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SettingsError) as err:
        load_settings(missing)
    assert err.value.message == f"The settings file {missing} does not exist."
    broken = write(tmp_path, "trainer: [unclosed\n")
    with pytest.raises(SettingsError) as err:
        load_settings(broken)
    assert err.value.message.startswith(f"The settings file {broken} is not valid YAML: ")
    other = write(tmp_path, "datasets: {max-bytes: 5}\n")
    with pytest.raises(SettingsError) as err:
        load_settings(other)
    assert err.value.message == f"The settings file {other} must hold one top-level key, `trainer`."
    scalar = write(tmp_path, "trainer: 5\n")
    with pytest.raises(SettingsError) as err:
        load_settings(scalar)
    assert err.value.message.startswith(f"Bad setting in {scalar}:\n  - trainer: Input should be")


def test_environment_overrides_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "trainer:\n  reinforcement: {engine: trl}\n")
    monkeypatch.setenv("AKKA_TRAINER__REINFORCEMENT__ENGINE", "verl")
    monkeypatch.setenv("AKKA_TRAINER__DATASETS__MAX_BYTES", "1024")
    monkeypatch.setenv("AKKA_TRAINER__REINFORCEMENT__IMAGE_TEXT", "true")
    settings = load_settings(path)
    assert settings.trainer.reinforcement.engine == "verl"
    assert settings.trainer.reinforcement.image_text is True
    assert settings.trainer.datasets.max_bytes == 1024


def test_a_nested_override_keeps_the_files_other_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "trainer:\n  controller:\n    interval-seconds: 0.2\n    stall-seconds: 30\n"
        "  ray: {address: 'http://head:8265', submit-timeout-seconds: 5}\n",
    )
    monkeypatch.setenv("AKKA_TRAINER__CONTROLLER__STALL_SECONDS", "90")
    monkeypatch.setenv("akka_trainer__ray__address", "http://other:8265")  # any case
    settings = load_settings(path)
    assert settings.trainer.controller.stall_seconds == 90
    assert settings.trainer.controller.interval_seconds == 0.2
    assert settings.trainer.ray.address == "http://other:8265"
    assert settings.trainer.ray.submit_timeout_seconds == 5


def test_a_list_or_an_object_comes_from_the_environment_as_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "trainer:\n  pools:\n    - {name: cpu, devices: 1}\n"
        "  grafana: {dashboard: d, link-lifetime-seconds: 600}\n",
    )
    monkeypatch.setenv(
        "AKKA_TRAINER__POOLS",
        '[{"name": "gpu", "accelerator": "H100", "devices": 8, "max-claim": 4}]',
    )
    monkeypatch.setenv("AKKA_TRAINER__RAY__RUNTIME_ENV", '{"env_vars": {"HF_HOME": "/cache"}}')
    monkeypatch.setenv("AKKA_TRAINER__DATABASE__URL", "null")
    monkeypatch.setenv("AKKA_TRAINER__GRAFANA", '{"url": "http://grafana:3000"}')
    settings = load_settings(path)
    assert settings.trainer.pools is not None
    assert [(p.name, p.devices, p.max_claim) for p in settings.trainer.pools] == [("gpu", 8, 4)]
    assert settings.trainer.ray.runtime_env == {"env_vars": {"HF_HOME": "/cache"}}
    assert settings.trainer.database.url is None
    # An object merges into the file's section: the file's other keys stay.
    assert settings.trainer.grafana.url == "http://grafana:3000"
    assert settings.trainer.grafana.link_lifetime_seconds == 600


def test_an_unknown_key_from_the_environment_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKKA_TRAINER__REINFORCMENT__ENGINE", "verl")
    with pytest.raises(SettingsError) as err:
        load_settings(None)
    assert err.value.message == (
        "Bad setting in the environment:\n"
        "  - trainer.reinforcment (AKKA_TRAINER__REINFORCMENT__ENGINE): not a known setting; "
        "remove it or check its spelling"
    )


def test_a_bad_value_from_the_environment_names_the_key_and_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKKA_TRAINER__DATASETS__MAX_BYTES", "lots")
    monkeypatch.setenv("AKKA_TRAINER__POOLS", '[{"name": "gpu", "devices": -1}]')
    with pytest.raises(SettingsError) as err:
        load_settings(None)
    assert err.value.message == (
        "Bad setting in the environment:\n"
        "  - trainer.datasets.max-bytes (AKKA_TRAINER__DATASETS__MAX_BYTES): Input should be a "
        "valid integer, unable to parse string as an integer\n"
        "  - trainer.pools.0.devices (AKKA_TRAINER__POOLS): Input should be greater than or "
        "equal to 0"
    )


def test_an_object_from_the_environment_that_is_not_json_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AKKA_TRAINER__DATASETS", "{max-bytes: 5}")
    with pytest.raises(SettingsError) as err:
        load_settings(None)
    assert err.value.message.startswith(
        "Bad setting in the environment: AKKA_TRAINER__DATASETS is not valid JSON ("
    )
    assert err.value.message.endswith("); a key that holds a list or an object takes a JSON value.")


def test_other_akka_variables_are_not_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AKKA_ACCESS_TOKEN", "secret")
    monkeypatch.setenv("AKKA_CONTEXT", "prod")
    assert load_settings(None).trainer.backend == "local"


def test_catalog_entries_are_kebab_case_too(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trainer:\n  catalog:\n    - id: m\n      path: /m\n      context-length: 512\n"
        "      envelopes:\n        - {method: sft, engine: trl, gpus: 1, host-memory-gib: 8}\n",
    )
    settings = load_settings(path)
    assert settings.trainer.catalog is not None
    model = settings.trainer.catalog[0]
    assert model.context_length == 512
    assert model.envelopes[0].host_memory_gib == 8


def test_a_catalog_entry_may_name_its_public_hub_id_and_revision(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trainer:\n  catalog:\n    - id: qwen3-0.6b\n      path: /models/qwen3\n"
        "      hub-id: Qwen/Qwen3-0.6B\n      hub-revision: c1899de\n",
    )
    settings = load_settings(path)
    assert settings.trainer.catalog is not None
    model = settings.trainer.catalog[0]
    assert (model.hub_id, model.hub_revision, model.public_name) == (
        "Qwen/Qwen3-0.6B",
        "c1899de",
        "Qwen/Qwen3-0.6B",
    )
    # Without one, downloads name the model by its catalog id, never by its path.
    bare = load_settings(write(tmp_path, "trainer:\n  catalog:\n    - {id: m, path: /m}\n"))
    assert bare.trainer.catalog is not None and bare.trainer.catalog[0].public_name == "m"


def test_catalog_entries_may_be_camel_case_as_in_a_plan_and_serialise_so(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trainer:\n  catalog:\n    - id: m\n      path: /m\n      contextLength: 512\n"
        "      envelopes:\n        - {method: sft, engine: trl, gpus: 1, gpuMemoryGib: 40}\n",
    )
    settings = load_settings(path)
    assert settings.trainer.catalog is not None
    entry = settings.trainer.catalog[0].to_json()
    assert entry["contextLength"] == 512
    assert entry["envelopes"][0]["gpuMemoryGib"] == 40


def test_a_bad_catalog_entry_names_its_key_as_written(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trainer:\n  catalog:\n    - id: m\n      path: /m\n      context-lenght: 512\n"
        "      envelopes:\n        - {method: sft, engine: trl, gpus: 0}\n",
    )
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert "trainer.catalog.0.context-lenght: not a known setting" in err.value.message
    assert "trainer.catalog.0.envelopes.0.gpus: Input should be greater than or equal to 1" in (
        err.value.message
    )


def test_settings_the_database_cannot_store_are_refused_at_start(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trainer:\n  projects:\n    - {name: maths, quota: 99999999999}\n"
        "    - {name: physics, quota: true}\n  pools:\n    - {name: gpu, devices: 9999999999999}\n",
    )
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert err.value.message == (
        f"Bad setting in {path}:\n"
        "  - trainer.pools.0.devices: Input should be less than or equal to 2147483647\n"
        "  - trainer.projects.0.quota: Input should be less than or equal to 2147483647\n"
        "  - trainer.projects.1.quota: Input should be a valid integer"
    )


def test_a_settings_key_written_twice_is_refused_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, "trainer:\n  backend: local\n  backend: ray\n")
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert err.value.message == (
        f"The settings file {path}: the key backend appears twice in one mapping (lines 2 and "
        "3); keep one of them."
    )
