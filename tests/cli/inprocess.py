"""The CLI run in this process: `akka(...)` as a user would type it, with its exit status and
what it wrote. Each command group keeps its end-to-end checks in a process of its own (the
`akka` helpers of `test_errors.py` and `test_conventions.py`); the refusals a command line
gets are checked here, without starting an interpreter each."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from unittest import mock

from akka_training.cli.main import main


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def akka(
    *args: str,
    env: dict[str, str] | None = None,
    unset: Iterable[str] = (),
    stdin: bytes = b"",
) -> Ran:
    """Run `akka ARGS` here with the environment less `unset` plus `env`, and `stdin`."""
    environ = {k: v for k, v in os.environ.items() if k not in set(unset)} | (env or {})
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, environ, clear=True),
        mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin))),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())
