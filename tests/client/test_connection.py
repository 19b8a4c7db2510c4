"""`connect()` finds the trainer and the token as the CLI does: the named context or
AKKA_CONTEXT or the current one; the given URL or TRAINER_URL or the context's; the given token
or AKKA_ACCESS_TOKEN or the context's login."""

from __future__ import annotations

from pathlib import Path

import pytest

from akka_training.client import connect, resolve
from akka_training.client.contexts import ConfigFile, Context
from akka_training.core.errors import InvalidRequest


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AKKA_ACCESS_TOKEN", "AKKA_CONTEXT", "TRAINER_URL", "AKKA_CONFIG"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def config(tmp_path: Path) -> ConfigFile:
    file = ConfigFile(
        tmp_path / "config.yaml",
        "local",
        {
            "local": Context("local", api_host="http://127.0.0.1:9001"),
            "lab": Context(
                "lab", api_host="http://auth.lab:9001", trainer_url="http://trainer.lab:9001"
            ),
        },
    )
    file.save()
    return file


def test_the_current_context_and_no_token(config: ConfigFile) -> None:
    found = resolve(config=config.path)
    assert (found.url, found.token, found.credential) == ("http://127.0.0.1:9001", None, "none")
    assert found.context is not None and found.context.name == "local"


def test_a_named_context_then_the_variable(
    config: ConfigFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve(context="lab", config=config).url == "http://trainer.lab:9001"
    monkeypatch.setenv("AKKA_CONTEXT", "lab")
    assert resolve(config=config).url == "http://trainer.lab:9001"
    assert resolve(context="local", config=config).url == "http://127.0.0.1:9001"


def test_an_unknown_context_is_refused_with_the_known_ones(
    config: ConfigFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKKA_ACCESS_TOKEN", "akka_secret")  # refused even when a variable wins
    with pytest.raises(InvalidRequest) as refused:
        resolve(context="nope", config=config)
    assert refused.value.message == (
        f"There is no context 'nope' in {config.path}; the file holds: lab, local. "
        "Create one with `akka config set-context NAME --api-host URL`."
    )


def test_the_url_given_then_a_named_context_then_the_variable_win(
    config: ConfigFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINER_URL", "http://elsewhere:9001/")
    # A context named explicitly (--context) beats the variable; the variable beats the current
    # context; the URL given beats both.
    assert resolve(context="lab", config=config).url == "http://trainer.lab:9001"
    assert resolve(config=config).url == "http://elsewhere:9001"
    assert resolve("http://given:9001", context="lab", config=config).url == "http://given:9001"


def test_the_token_given_then_the_variable_win_over_the_login(
    config: ConfigFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    config.contexts["local"].login = "akka_login_that_would_be_exchanged"
    monkeypatch.setenv("AKKA_ACCESS_TOKEN", "akka_from_env")
    found = resolve(config=config)
    assert (found.token, found.credential) == ("akka_from_env", "AKKA_ACCESS_TOKEN")
    given = resolve(token="akka_given", config=config)
    assert (given.token, given.credential) == ("akka_given", "given")


def test_connect_reads_the_file_akka_config_names(
    config: ConfigFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AKKA_CONFIG", str(config.path))
    monkeypatch.setenv("AKKA_CONTEXT", "lab")
    with connect() as client:
        assert client.url == "http://trainer.lab:9001"
