"""Start-up's admin token: given by the settings (a Secret) or minted on a first start, and never
a second one when a pod restarts with a fresh home and the same database; the CLI context only
where a home is meant for it; every refusal in its words."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from akka_training.client.contexts import load_config
from akka_training.config.settings import Settings, SettingsError
from akka_training.deployment.context import build_context
from akka_training.server.bootstrap import bootstrap, bootstrap_home
from akka_training.storage.models import Token

GIVEN = "a" * 40


@pytest.fixture(autouse=True)
def cli_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cli-config.yaml"
    monkeypatch.setenv("AKKA_CONFIG", str(path))
    return path


def start(home: Path, database: Path, **bootstrap_settings: Any) -> Any:
    """One start of a trainer whose home is `home` (fresh for a new pod) and whose database is
    `database` (the same across restarts)."""
    settings = Settings.model_validate(
        {
            "trainer": {
                "home": str(home),
                "database": {"url": f"sqlite:///{database}"},
                "catalog": [],
                "pools": [{"name": "default", "devices": 1}],
                "bootstrap": bootstrap_settings,
            }
        }
    )
    ctx = build_context(settings)
    try:
        bootstrap(ctx)
        with ctx.db.session() as session:
            return [
                (t.name, t.revoked_at is None)
                for t in session.scalars(select(Token).where(Token.kind == "admin"))
            ]
    finally:
        ctx.db.dispose()


def test_a_pod_restart_with_the_same_database_mints_no_second_token(
    tmp_path: Path, cli_config: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "shared.db"
    first = start(tmp_path / "pod-1", db, **{"write-cli-context": False})
    assert first == [("admin (first start)", True)]
    assert (tmp_path / "pod-1" / "admin-token").stat().st_mode & 0o077 == 0
    assert not cli_config.exists()  # no home is meant for a CLI here
    with caplog.at_level(logging.INFO, logger="akka_training.server.bootstrap"):
        again = start(tmp_path / "pod-2", db, **{"write-cli-context": False})
    assert again == first
    assert not (tmp_path / "pod-2" / "admin-token").exists()
    assert "the database already holds an admin token; none created" in caplog.text


def test_the_given_token_is_registered_once_and_written_nowhere(
    tmp_path: Path, cli_config: Path
) -> None:
    db = tmp_path / "shared.db"
    secret = tmp_path / "secret" / "admin-token"
    secret.parent.mkdir()
    secret.write_text(GIVEN + "\n")
    for pod in ("pod-1", "pod-2", "pod-3"):
        tokens = start(
            tmp_path / pod, db, **{"admin-token-file": str(secret), "write-cli-context": False}
        )
        assert tokens == [("admin (trainer.bootstrap.admin-token)", True)]
        assert not (tmp_path / pod / "admin-token").exists()
    assert not cli_config.exists()
    # Where a home is meant for the CLI (the default), the context holds the given token.
    start(tmp_path / "laptop", db, **{"admin-token": GIVEN})
    assert load_config().contexts["local"].login == GIVEN


def test_a_rotation_adds_the_new_token_beside_the_old_until_it_is_revoked(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    start(tmp_path / "a", db, **{"admin-token": GIVEN})
    tokens = start(tmp_path / "b", db, **{"admin-token": "b" * 40})
    assert [live for _, live in tokens] == [True, True]


def test_a_revoked_given_token_stops_start_up(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    start(tmp_path / "a", db, **{"admin-token": GIVEN})
    settings = Settings.model_validate(
        {
            "trainer": {
                "home": str(tmp_path / "b"),
                "database": {"url": f"sqlite:///{db}"},
                "catalog": [],
            }
        }
    )
    ctx = build_context(settings)
    with ctx.db.session() as session:
        for token in session.scalars(select(Token)):
            token.revoked_at = datetime.now(UTC)
    ctx.db.dispose()
    with pytest.raises(SettingsError) as caught:
        start(tmp_path / "b", db, **{"admin-token": GIVEN})
    assert "which is revoked; put a new secret in trainer.bootstrap.admin-token (or its file)" in (
        caught.value.message
    )


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"admin-token": "short"},
            "Bad setting: trainer.bootstrap.admin-token is shorter than 32 characters; use a "
            "long random secret (openssl rand -hex 32).",
        ),
        (
            {"admin-token": GIVEN, "admin-token-file": "/x"},
            "Bad setting: trainer.bootstrap.admin-token and trainer.bootstrap.admin-token-file "
            "are both set; keep one.",
        ),
        (
            {"admin-token-file": "/nonexistent/admin-token"},
            "Bad setting: trainer.bootstrap.admin-token-file /nonexistent/admin-token cannot be "
            "read (No such file or directory); mount the admin token's Secret there or unset "
            "the setting.",
        ),
    ],
)
def test_bad_bootstrap_settings_are_refused_by_name(
    tmp_path: Path, given: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        start(tmp_path / "home", tmp_path / "db.sqlite", **given)
    assert caught.value.message == message


def test_the_context_is_written_before_the_catalog_is_loaded(
    tmp_path: Path, cli_config: Path
) -> None:
    # `akka trainer serve` bootstraps from build_context's database hook: a command run while
    # the development models are built already finds the context.
    settings = Settings.model_validate(
        {
            "trainer": {
                "home": str(tmp_path / "home"),
                "database": {"url": f"sqlite:///{tmp_path / 'trainer.db'}"},
                "catalog": [],
                "pools": [{"name": "default", "devices": 1}],
            }
        }
    )
    seen: list[str] = []

    def at_database(given: Settings, db: Any) -> None:
        bootstrap_home(given, db)
        seen.extend(load_config().contexts)

    ctx = build_context(settings, on_database=at_database)
    try:
        assert seen == ["local"]
        bootstrap(ctx)  # the app's start-up, after: nothing changes
        assert list(load_config().contexts) == ["local"]
        assert load_config().contexts["local"].api_host == settings.trainer_url
    finally:
        ctx.db.dispose()
