"""A pytest plugin (``-p akka_training.testing.fast_layer`` in the project's pytest settings):
the fast layer, ``pytest -m "not slow"``, and the full suite, ``pytest``, run on two worker
processes when pytest-xdist is installed, so that the fast layer fits in a minute and the full
suite in about half an hour on a two-core machine (in one process, the full suite took 33
minutes in CI). Any other selection (a file, ``-k``, another ``-m``) runs in one process as
before, as does a run that says ``-n`` or ``-p no:xdist`` itself, or sets
``AKKA_FAST_LAYER_WORKERS=0``.

pytest keeps the test modules it rewrote (for its assertion messages) in ``__pycache__`` even
where ``PYTHONDONTWRITEBYTECODE`` is set, as on this project's machines: rewriting every test
module again cost each process six seconds of its start, a tenth of the fast layer. Set
``AKKA_TEST_REWRITE_CACHE=0`` to leave the variable in charge."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

if os.environ.get("AKKA_TEST_REWRITE_CACHE", "1") != "0":
    # Read by pytest's import hook as each test module is imported, which is after this plugin.
    sys.dont_write_bytecode = False

WORKERS_ENV = "AKKA_FAST_LAYER_WORKERS"


def workers_for(args: list[str], environ: dict[str, str] | os._Environ[str]) -> int:
    """How many xdist workers a run with these command-line arguments gets (0: no xdist)."""
    wanted = int(environ.get(WORKERS_ENV, "2") or 0)
    if wanted <= 0 or importlib.util.find_spec("xdist") is None:
        return 0
    if any(a == "-n" or a.startswith(("-n", "--numprocesses", "--dist")) for a in args):
        return 0
    if "no:xdist" in args or any(a.startswith("-p") and "no:xdist" in a for a in args):
        return 0
    marks = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-m"]
    marks += [a[2:] for a in args if a.startswith("-m") and len(a) > 2]
    marks += [a.split("=", 1)[1] for a in args if a.startswith("--markexpr=")]
    if [m.strip() for m in marks] not in ([], ["not slow"]):
        return 0
    # A run of some files or tests (`pytest -m "not slow" tests/cli`) stays in one process.
    for i, arg in enumerate(args):
        if arg.startswith("-"):
            continue
        if i > 0 and args[i - 1] in _TAKES_A_VALUE:
            continue
        return 0
    return wanted


# pytest's options whose value is the next argument.
_TAKES_A_VALUE = {"-m", "-k", "-p", "-c", "-o", "-W", "--rootdir", "--confcutdir", "--basetemp"}


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: list[str]
) -> None:
    workers = workers_for(args, os.environ)
    if workers:
        # By file: a module's tests share its module-scoped fixtures and may build on the
        # tests before them (a trainer started once, the first test's run), so a module is
        # never split between workers.
        args[:] = [*args, "-n", str(workers), "--dist", "loadfile"]
