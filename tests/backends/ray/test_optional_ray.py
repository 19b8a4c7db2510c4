"""Ray is an optional dependency: nothing imports it but a deployment whose backend is `ray`,
and such a deployment without it gets a message that says what to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_package_and_the_bootstrap_import_without_ray() -> None:
    result = _python(
        "import sys\n"
        "import akka_training.backends.ray, akka_training.backends.ray.bootstrap\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_ray_deployment_without_ray_is_told_what_to_install() -> None:
    # `None` in sys.modules makes `import ray` fail as it does where Ray is not installed.
    result = _python(
        "import sys\n"
        "sys.modules['ray'] = None\n"
        "from akka_training.backends.ray import RayBackend, RayNotInstalled\n"
        "from akka_training.config.settings import RayBackend as Settings\n"
        "try:\n"
        "    RayBackend(Settings(), [])\n"
        "except RayNotInstalled as exc:\n"
        "    print(exc.code, exc.message)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("bad-setting trainer.backend is `ray`")
    assert "pip install 'akka-training[ray]'" in result.stdout
