"""What a user sees when the command line is wrong or the install lacks the service: one
message, the right exit status, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.cli import inprocess


def here(*args: str) -> inprocess.Ran:
    return inprocess.akka(*args, unset=["TRAINER_URL", "AKKA_CONTEXT"])


def akka(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """`akka ARGS` in a process of its own, after `prelude` (end to end)."""
    code = f"{prelude}\nimport sys\nsys.argv = ['akka', *{list(args)!r}]\n"
    code += "from akka_training.cli.main import run\nrun()\n"
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_URL", "AKKA_CONTEXT")}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env
    )


def test_a_missing_argument_is_a_usage_error() -> None:
    result = here("training", "runs", "get")
    assert result.returncode == 2
    assert "Error: Missing argument 'RUN'." in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_command_is_a_usage_error() -> None:
    result = here("training", "runs", "bogus")
    assert result.returncode == 2
    assert "Error: No such command 'bogus'." in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unknown_output_format_is_refused() -> None:
    result = here("-o", "xml", "training", "info")
    assert result.returncode == 2
    assert result.stderr.strip() == "Error: -o takes text, json or yaml, not 'xml'."


def test_a_global_flag_without_its_value_is_refused() -> None:
    result = here("training", "info", "--context")
    assert result.returncode == 2
    assert result.stderr.strip() == "Error: --context needs a value."


def test_serve_without_the_service_extra_names_the_extra() -> None:
    # As on an install without the `service` extra: the web server is not there.
    result = akka("trainer", "serve", prelude="import sys\nsys.modules['uvicorn'] = None")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: akka trainer serve needs the trainer service's dependencies, which this "
        "installation lacks (no module 'uvicorn'): install them with "
        "pip install 'akka-training[service]'."
    )


def test_serve_on_a_port_something_holds_says_so(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        result = inprocess.akka(
            "trainer",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env={"AKKA_HOME": str(tmp_path / "home"), "AKKA_CONFIG": str(tmp_path / "c.yaml")},
            unset=["TRAINER_URL", "AKKA_CONTEXT"],
        )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: akka trainer serve cannot listen on 127.0.0.1:{port} (Address already in use); "
        "stop what holds the port or choose another with --port."
    )
