"""`pip install akka-training` gives the CLI and the client only: built from this repository into
a fresh virtual environment with no extras, the CLI starts, the client imports and reaches a real
trainer, none of the service or the training stack is installed, and `akka trainer serve` names
the extra it needs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ABSENT = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "pyarrow", "torch", "trl")


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("client-install")
    # A copy of what the package is built from, so that the build leaves this checkout alone.
    source = root / "source"
    shutil.copytree(
        REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # A normal install from the registry: pip fetches httpx, pydantic, typer, rich and PyYAML.
    result = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(source)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return venv


def run(
    venv: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        env=_clean_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_cli_starts_and_the_client_imports(client_venv: Path) -> None:
    helped = run(client_venv, "akka", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "training" in helped.stdout
    imported = run(
        client_venv,
        "python",
        "-c",
        "import akka_training.client as c, akka_training.api.runs\n"
        "from akka_training.client import TrainerClient, connect\n"
        "print(c.__file__)",
    )
    assert imported.returncode == 0, imported.stderr
    assert str(client_venv) in imported.stdout  # the installed package, not this checkout


@pytest.mark.slow
def test_nothing_of_the_service_or_the_training_stack_is_installed(client_venv: Path) -> None:
    code = (
        "import importlib.util, json\n"
        f"print(json.dumps([m for m in {ABSENT!r} if importlib.util.find_spec(m)]))"
    )
    found = run(client_venv, "python", "-c", code)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == []


@pytest.mark.slow
def test_serve_names_the_service_extra(client_venv: Path) -> None:
    served = run(client_venv, "akka", "trainer", "serve")
    assert served.returncode == 1
    assert served.stderr.strip() == (
        "error: akka trainer serve needs the trainer service's dependencies, which this "
        "installation lacks (no module 'uvicorn'): install them with "
        "pip install 'akka-training[service]'."
    )
    assert "Traceback" not in served.stderr


@pytest.mark.slow
def test_the_installed_cli_and_client_reach_a_real_trainer(
    client_venv: Path, trainer_factory: Any
) -> None:
    from tests.integration.helpers import scripted_settings

    trainer = trainer_factory(scripted_settings())
    info = run(client_venv, "akka", "training", "info", "-o", "json", env=trainer.env)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["backend"] == "local"
    code = (
        "from akka_training.client import connect\n"
        "with connect() as trainer:\n"
        "    print(trainer.capacity().pools[0].pool, trainer.whoami().kind)"
    )
    reached = run(client_venv, "python", "-c", code, env=trainer.env)
    assert reached.returncode == 0, reached.stderr
    assert reached.stdout.split() == ["default", "access"]


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without this checkout on the path or a virtual environment active."""
    env = {**os.environ, **(extra or {})}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(name, None)
    return env


@pytest.mark.slow
def test_a_users_type_checker_sees_the_clients_types(client_venv: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "from akka_training.client import TrainerClient\n"
        "client = TrainerClient('http://127.0.0.1:9', 'token')\n"
        "count: int = client.runs()\n"
    )
    # The checker of this checkout's environment, reading the fresh install's packages.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            str(client_venv / "bin" / "python"),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert "missing library stubs or py.typed marker" not in result.stdout, result.stdout
    assert 'Incompatible types in assignment (expression has type "list[RunSummary]"' in (
        result.stdout
    ), result.stdout
