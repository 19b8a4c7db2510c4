"""vLLM's CPU environment for the tests that run vLLM (`scripts/setup-vllm-env.sh`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def vllm_python(*modules: str) -> Path:
    """The environment's interpreter, once it imports vLLM and `modules`; the test is skipped,
    saying so, where it is not built, and failed where CI requires it
    (``AKKA_REQUIRE_VLLM_ENV``)."""
    imports = ", ".join(("vllm", *modules))
    built = VLLM_PYTHON.exists() and (
        subprocess.run([str(VLLM_PYTHON), "-c", f"import {imports}"], check=False).returncode == 0
    )
    if not built and os.environ.get("AKKA_REQUIRE_VLLM_ENV"):
        pytest.fail(
            "AKKA_REQUIRE_VLLM_ENV is set but vLLM's environment is not built "
            "(scripts/setup-vllm-env.sh)"
        )
    if not built:
        pytest.skip(
            "no vLLM CPU environment at .venv-vllm: build it with scripts/setup-vllm-env.sh"
        )
    return VLLM_PYTHON
