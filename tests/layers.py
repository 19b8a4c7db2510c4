"""The suite's two layers, and the guards that keep the fast one fast.

`python -m pytest -m "not slow"` is the fast layer, the one a contributor runs while working (under
a minute); `./scripts/test` runs everything and is the CI command. A test belongs to the slow layer,
marked `slow`, when it starts a trainer process, runs a real job or a training step, starts Ray,
runs verl's own environment, or builds the development models; a parameter that widens a fast
test's cases may be marked slow on its own. A test that talks to the Postgres server is marked
`postgres`. The fast layer does not import a module marked slow as a whole (`module_is_slow`).

Two guards, wired in `tests/conftest.py`:

- At collection, `layer_problems` names every test that uses a fixture of the slow layer (or the
  Postgres server) without the marker; collection then fails with that list.
- While a test runs, `refuse_unless_slow` stops a trainer process, a Ray head or a training loop
  from starting inside a test that is not marked `slow`. This catches what no fixture name shows:
  a module's own fixture that starts a trainer, a test that trains in-process.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

# Fixtures only the slow layer may use, and what makes each slow.
SLOW_FIXTURES: dict[str, str] = {
    "trainer_factory": "starts trainer processes",
    "ray_head": "starts a Ray head",
    "ray_head_factory": "starts Ray heads",
    "verl_env": "runs verl's own environment (.venv-verl)",
}
POSTGRES_FIXTURES: dict[str, str] = {"postgres_server": "talks to the Postgres server"}

F = TypeVar("F", bound=Callable[..., Any])
_GUARDED = "_akka_slow_guard"
# The test whose setup, call or teardown runs now (module fixtures run inside the first test).
_current: list[pytest.Item] = []


def layer_problems(items: Iterable[pytest.Item]) -> list[str]:
    """One line per test that uses a fixture of the slow layer (or Postgres) without its marker."""
    problems = []
    for item in items:
        # Every test function has its fixtures' closure; other kinds of item have no fixtures.
        names = getattr(item, "fixturenames", ())
        for fixtures, marker in ((SLOW_FIXTURES, "slow"), (POSTGRES_FIXTURES, "postgres")):
            used = [f"{name} ({why})" for name, why in fixtures.items() if name in names]
            if used and item.get_closest_marker(marker) is None:
                problems.append(
                    f"{item.nodeid} uses {', '.join(used)} but is not marked {marker}: add "
                    f"@pytest.mark.{marker} to it, or pytestmark = pytest.mark.{marker} to its module"
                )
    return problems


def module_is_slow(path: Path) -> bool:
    """Whether the test module at `path` marks all of itself slow (``pytestmark =
    pytest.mark.slow``, alone or in a list), read from its source without importing it: the
    fast layer then leaves it uncollected, as `-m "not slow"` would deselect every test in it,
    and importing it can load the training stack (seconds per worker)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return False  # collected as usual, so that pytest reports what is wrong with it
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
                value = node.value
                marks = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
                if any(_is_slow_mark(mark) for mark in marks):
                    return True
    return False


def _is_slow_mark(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Attribute) and ast.unparse(node) == "pytest.mark.slow"


def refusal(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return (
        f'Tests of the slow layer must say so, or `pytest -m "not slow"` stops being fast:\n{lines}'
    )


@contextmanager
def running(item: pytest.Item) -> Iterator[None]:
    """Mark `item` as the test that runs now (its setup, call and teardown)."""
    _current.append(item)
    try:
        yield
    finally:
        _current.pop()


def refuse_unless_slow(what: str) -> None:
    """Fail the running test when it is not marked slow and is about to do `what`."""
    if not _current:
        return
    item = _current[-1]
    if item.get_closest_marker("slow") is None:
        pytest.fail(
            f"{item.nodeid} {what} but is not marked slow: add @pytest.mark.slow to it, or "
            "pytestmark = pytest.mark.slow to its module.",
            pytrace=False,
        )


def guard(owner: Any, name: str, what: str) -> Callable[[], None] | None:
    """Make `owner.name` refuse to run in a fast test; returns what undoes it (None when it was
    guarded already, by an enclosing session)."""
    original = getattr(owner, name)
    if getattr(original, _GUARDED, False):
        return None
    setattr(owner, name, _guarded(original, what))
    return lambda: setattr(owner, name, original)


def guard_training_loop() -> Callable[[], None] | None:
    """Guard `transformers.Trainer.train` (every TRL trainer's loop) once transformers is loaded;
    importing it only to guard it would cost every run seconds."""
    module = sys.modules.get("transformers.trainer")
    if module is None:
        return None
    return guard(module.Trainer, "train", "runs a training loop")


def _guarded(func: F, what: str) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        refuse_unless_slow(what)
        return func(*args, **kwargs)

    setattr(wrapper, _GUARDED, True)
    return wrapper  # type: ignore[return-value]
