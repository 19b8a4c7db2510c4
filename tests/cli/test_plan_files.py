"""Plan files the CLI cannot send: each refused with one sentence naming the file and what to
change, exit status 1, before any request (no trainer is running here) and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.inprocess import akka

PLAN = "kind: run\nproject: maths\nbaseModel: tiny-chat\nconfig:\n  dataset: maths/train\n"

# Seven levels of nine aliases: 4.8 million strings once expanded, from 400 bytes of text.
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdef", "bcdefg", strict=True)
)


def refusal(path: Path | str, *, stdin: bytes = b"") -> str:
    """What `akka training runs start -f PATH --dry-run` says on stderr; it must exit 1."""
    # A trainer URL nobody listens on: the plan must be refused before any request.
    result = akka(
        *("training", "runs", "start", "-f", str(path), "--dry-run"),
        env={"TRAINER_URL": "http://127.0.0.1:9", "TRAINER_TOKEN": "unused"},
        unset=["AKKA_CONTEXT"],
        stdin=stdin,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return result.stderr.strip()


def refusal_of_a_process(path: Path | str, *, stdin: bytes = b"") -> str:
    """The same as `refusal`, from the command in a process of its own (end to end)."""
    code = (
        f"import sys\nsys.argv = ['akka', 'training', 'runs', 'start', '-f', {str(path)!r}, "
        "'--dry-run']\nfrom akka_training.cli.main import run\nrun()\n"
    )
    env = {**os.environ, "TRAINER_URL": "http://127.0.0.1:9", "TRAINER_TOKEN": "unused"}
    env.pop("AKKA_CONTEXT", None)
    result = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, check=False, env=env
    )
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert result.stdout == b""
    return stderr.strip()


def test_a_plan_that_is_not_utf8_names_the_byte_and_the_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_bytes(PLAN.encode() + b"description: caf\xe9\n")
    assert refusal(plan) == (
        f"error: {plan} is not UTF-8 text (byte 0xe9 on line 6); save it as UTF-8."
    )


def test_a_plan_on_standard_input_that_is_not_utf8(tmp_path: Path) -> None:
    # End to end: the command's own process reads its standard input.
    assert refusal_of_a_process("-", stdin=b"\xff\xfe") == (
        "error: standard input is not UTF-8 text (byte 0xff on line 1); save it as UTF-8."
    )


def test_a_key_written_twice_is_refused_by_name(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "  method: sft\n  seed: 1\n  method: grpo\n")
    assert refusal(plan) == (
        f"error: {plan}: the key method appears twice in one mapping (lines 6 and 8); keep "
        "one of them."
    )


def test_a_deeply_nested_plan_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"kind": "run", "description": ' + "[" * 5000 + "]" * 5000 + "}")
    assert refusal(plan) == (
        f"error: {plan} nests deeper than 32 levels (at line 1); a plan is a few levels deep: "
        "check the indentation and brackets."
    )


@pytest.mark.parametrize("value", [".nan", ".inf", "-.Inf"])
def test_nan_and_infinity_are_refused_with_their_line(tmp_path: Path, value: str) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + f"  method: grpo\n  rlHyperparams:\n    temperature: {value}\n")
    assert refusal(plan) == (
        f"error: {plan} line 8: {value} is not a number a plan or a setting can hold; write a "
        "finite number."
    )


def test_a_number_too_long_for_any_field_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "  seed: " + "9" * 5000 + "\n")
    assert refusal(plan) == (
        f"error: {plan} line 6: a whole number of 5000 digits is larger than any field holds; "
        "write a smaller one."
    )


def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + BOMB)
    # In this process's CPU seconds: the machine's load does not count.
    started = time.process_time()
    message = refusal(plan)
    assert time.process_time() - started < 10
    assert message == (
        f"error: {plan} holds more than 100,000 values once its aliases (*name) are expanded "
        "(the value on line 11 alone does); write the values out, or use fewer aliases."
    )


def test_an_alias_that_holds_itself_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "tools: &t [*t]\n")
    assert refusal(plan) == (
        f"error: {plan}: the alias on line 6 refers to a value that holds it; a document "
        "cannot hold itself."
    )


def test_a_plan_over_four_mebibytes_is_refused(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + "description: " + "x" * (4 * 1024 * 1024) + "\n")
    assert refusal(plan) == (
        f"error: {plan} is larger than the 4,194,304 bytes a document may hold; check that "
        "this is the right file."
    )


def test_a_lone_surrogate_is_refused_naming_its_line_and_field(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN + '  method: sft\ndescription: "caf\\ud800e"\n')
    assert refusal(plan) == (
        f"error: {plan} line 7 (description): the text holds a lone surrogate (an escape such "
        "as \\ud800 that is half of a character); write the character itself, or both halves "
        "of its pair."
    )
