"""The CLI's conventions without a trainer: usage mistakes, exit statuses, errors as JSON, the
debug flag, shell completion, colour, which URL a context and a variable choose."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from akka_training.cli import exits
from akka_training.testing.service import free_port, free_ports
from tests.cli import inprocess

DOCS = Path(__file__).resolve().parents[2] / "docs"


# What neither helper below lets through from the environment the tests run in.
UNSET = ("TRAINER_URL", "AKKA_CONTEXT", "AKKA_ACCESS_TOKEN", "NO_COLOR", "AKKA_DEBUG")


def here(*args: str, env: dict[str, str] | None = None) -> inprocess.Ran:
    """`akka ARGS` run in this process, with `env` over the cleaned environment."""
    config = os.environ.get("AKKA_CONFIG_FOR_TESTS", "/nonexistent/akka-config.yaml")
    return inprocess.akka(*args, env={"AKKA_CONFIG": config, **(env or {})}, unset=UNSET)


def akka(
    *args: str, prelude: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`akka ARGS` in a process of its own, after `prelude` (end to end: what the command's
    start reads, such as colour and completion variables, a failure planted before it, and
    the trainer a command line reaches)."""
    return finish(start(*args, prelude=prelude, env=env))


def start(
    *args: str, prelude: str = "", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`akka` started and not waited for: commands that each wait out the client's retries of
    a refused connection run side by side."""
    code = f"{prelude}\nimport sys\nsys.argv = ['akka', *{list(args)!r}]\n"
    code += "from akka_training.cli.main import run\nrun()\n"
    base = {k: v for k, v in os.environ.items() if k not in UNSET}
    base["AKKA_CONFIG"] = base.get("AKKA_CONFIG_FOR_TESTS", "/nonexistent/akka-config.yaml")
    base.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base,
    )


def finish(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["training", "runs", "start"], "Error: Missing option '-f' / '--file'."),
        (["training", "runs", "lst"], "Error: No such command 'lst'. Did you mean 'list'?"),
        (["training", "runs", "list", "--bogus"], "Error: No such option: --bogus"),
        (
            ["training", "runs", "list", "--limit", "abc"],
            "Error: Invalid value for '--limit': Input should be a valid integer, unable to "
            "parse string as an integer",
        ),
        (["training", "runs", "wait"], "Error: Missing argument 'RUN'."),
        (
            ["training", "runs", "list", "--limit", "-5"],
            "Error: Invalid value for '--limit': Input should be greater than or equal to 1",
        ),
        (
            ["training", "runs", "regrade", "abcdef", "--reward", "r.yaml", "--steps", "x-y"],
            "Error: Invalid value for '--steps': give a step or a range of steps (N, A-B, A- or "
            "-B), not 'x-y'.",
        ),
        (
            ["training", "runs", "get", "ab"],
            "Error: Invalid value for 'RUN': give the run's id or at least 3 characters of it, "
            "not 'ab'.",
        ),
    ],
)
def test_a_usage_mistake_prints_the_usage_line_and_one_sentence(
    args: list[str], sentence: str
) -> None:
    result = here(*args)
    assert result.returncode == exits.USAGE == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("Usage: akka training runs")
    assert lines[-1] == sentence
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_usage_line_names_a_required_argument_as_the_help_does() -> None:
    result = akka("training", "evaluations", "get", "ev")
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[0] == "Usage: akka training evaluations get [OPTIONS] EVALUATION"
    )


def test_a_usage_mistake_under_json_is_also_an_error_object_on_stdout() -> None:
    result = here("-o", "json", "training", "runs", "wait")
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "error": {"code": "usage", "message": "Missing argument 'RUN'.", "problems": []}
    }


def test_an_unreachable_trainer_has_its_own_exit_status_and_error_object() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = [
        start("--trainer-url", url, "training", "runs", "get", "abc123"),
        start("--trainer-url", url, "-o", "json", "training", "runs", "get", "abc123"),
        start("--trainer-url", url, "-o", "yaml", "training", "info"),
    ]
    text, as_json, as_yaml = (finish(process) for process in started)
    assert text.returncode == exits.UNREACHABLE == 3
    assert text.stderr.strip() == (
        f"error: The trainer at {url} does not answer; start it with `akka trainer serve` or "
        "point --trainer-url (or the context) at a running one."
    )
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["error"]["code"] == "unreachable"
    assert as_json.stderr == ""
    assert yaml.safe_load(as_yaml.stdout)["error"]["code"] == "unreachable"


BOOM = (
    "import akka_training.client.contexts as c\n"
    "def boom(path=None):\n"
    "    raise RuntimeError('the disk is on fire')\n"
    "c.load_config = boom\n"
)


def test_an_unexpected_failure_is_one_sentence_and_a_traceback_only_with_debug() -> None:
    result = akka("config", "get-contexts", prelude=BOOM)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: akka failed unexpectedly: RuntimeError: the disk is on fire. Run the command "
        "again with --debug for the traceback."
    )
    debug = akka("config", "get-contexts", "--debug", prelude=BOOM)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "RuntimeError: the disk is on fire" in debug.stderr
    assert (
        "Traceback" in akka("config", "get-contexts", prelude=BOOM, env={"AKKA_DEBUG": "1"}).stderr
    )


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_scripts_for_each_shell(shell: str) -> None:
    result = akka("completion", shell)
    assert result.returncode == 0
    assert "_AKKA_COMPLETE=complete_" + shell in result.stdout


def test_the_completion_script_completes_commands() -> None:
    result = akka(
        env={"_AKKA_COMPLETE": "complete_bash", "COMP_WORDS": "akka training ru", "COMP_CWORD": "2"}
    )
    assert result.returncode == 0
    assert result.stdout.split() == ["runs"]
    assert akka("completion", "tcsh").stderr.strip() == (
        "Error: completion takes bash, zsh or fish, not 'tcsh'."
    )


def test_no_color_takes_every_style_out_of_help() -> None:
    forced = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    styled = akka("training", "runs", "--help", env=forced)
    assert "\x1b[" in styled.stdout
    plain = akka("--no-color", "training", "runs", "--help", env=forced)
    assert plain.returncode == 0
    assert "\x1b[" not in plain.stdout
    assert "Usage: akka training runs" in plain.stdout


def test_an_explicit_context_beats_trainer_url_and_the_variable_beats_the_current_one(
    tmp_path: Path,
) -> None:
    far, near = free_ports(2)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "current-context": "far",
                "contexts": {"far": {"api-host": f"http://127.0.0.1:{far}"}},
            }
        )
    )
    env = {"AKKA_CONFIG": str(config), "TRAINER_URL": f"http://127.0.0.1:{near}"}
    started = [
        start("--context", "far", "training", "info", env=env),
        start("training", "info", env=env),
        start(
            "--context",
            "far",
            "--trainer-url",
            f"http://127.0.0.1:{near}",
            "training",
            "info",
            env=env,
        ),
    ]
    named, current, flag = (finish(process) for process in started)
    assert f"The trainer at http://127.0.0.1:{far} does not answer" in named.stderr
    assert f"The trainer at http://127.0.0.1:{near} does not answer" in current.stderr
    assert f"The trainer at http://127.0.0.1:{near} does not answer" in flag.stderr


def test_a_command_takes_no_global_flag_from_the_one_run_before_it_in_the_process() -> None:
    assert here("-o", "json", "config", "get-contexts").stdout == "[]\n"
    assert here("config", "get-contexts").stdout.startswith("CURRENT   NAME")


def test_singular_nouns_of_auth_and_config() -> None:
    assert here("auth", "token", "--help").returncode == 0
    assert here("config", "get-context").returncode == 0


def test_help_says_what_a_prefix_takes() -> None:
    out = here("--no-color", "training", "runs", "get", "--help").stdout
    assert "unambiguous prefix of it (3" in out


def test_the_exit_statuses_are_documented_as_the_code_has_them() -> None:
    page = (DOCS / "cli.md").read_text()
    rows = dict(re.findall(r"^\| `(\d)` +\| ([^|]+?) +\|", page, flags=re.M))
    assert {int(k): v for k, v in rows.items()} == exits.CODES
