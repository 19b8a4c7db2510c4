"""`akka --help`: the page the entry point writes itself is the page typer draws, and writing it
imports neither typer nor rich (its CPU cost is `bench/root_help.py`'s to measure)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from akka_training.cli import root
from tests.cli.inprocess import akka


def typers_page(columns: int) -> str:
    """The root page as typer renders it, `columns` wide, without colour."""
    out = io.StringIO()
    environ = {k: v for k, v in os.environ.items() if k != "TERMINAL_WIDTH"}
    environ |= {"COLUMNS": str(columns), "NO_COLOR": "1"}
    with mock.patch.dict(os.environ, environ, clear=True), contextlib.redirect_stdout(out):
        assert root.main(["--help"]) == 0
    return out.getvalue()


def test_the_root_page_says_what_the_commands_and_global_flags_are() -> None:
    ran = akka("--help", env={"COLUMNS": "80"}, unset=["TERMINAL_WIDTH"])
    assert ran.returncode == 0
    lines = [line.strip(" │") for line in ran.stdout.splitlines()]
    assert lines[0].startswith("Global flags (anywhere on the line): --context NAME")
    assert "Usage: akka [OPTIONS] COMMAND [ARGS]..." in lines
    assert "akka training: fine-tune LoRA adapters with SFT, DPO, GRPO and GSPO." in lines
    assert "--help        <bool>  Show this message and exit." in lines
    for line in (
        "completion  Print the shell completion script for bash, zsh or fish.",
        "auth        Log in to a trainer and manage tokens.",
        "config      Contexts: which trainer, which login.",
        "trainer     Run the trainer service.",
        "training    Train adapters: datasets, runs, pipelines, capacity.",
    ):
        assert line in lines
    assert akka(env={"COLUMNS": "80"}, unset=["TERMINAL_WIDTH"]).stdout == ran.stdout


@pytest.mark.parametrize("columns", [80, 132, 60])
def test_the_root_page_is_the_page_typer_draws(columns: int) -> None:
    # 60 columns are too few for the page's lines: typer draws it then, wrapped.
    ran = akka("--help", env={"COLUMNS": str(columns)}, unset=["TERMINAL_WIDTH"])
    assert ran.stdout == typers_page(columns)


def test_the_root_page_imports_neither_typer_nor_rich() -> None:
    code = (
        "import io, json, sys, contextlib\n"
        "sys.argv = ['akka', '--help']\n"
        "from akka_training.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n    run()\n"
        "loaded = sorted(m for m in ('typer', 'rich', 'click') if m in sys.modules)\n"
        "print(json.dumps([loaded, 'Usage: akka' in out.getvalue()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], True]
