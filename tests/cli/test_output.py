"""Tables and detail rows as a person (or a program reading a pipe) sees them."""

from __future__ import annotations

import io
import json
import random
import string
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from akka_training.cli.output import (
    COLUMN_GAP,
    _grid,
    _print,
    details,
    emit,
    plain_lines,
    rich_grid,
    table,
)
from akka_training.cli.state import state


class _Terminal(io.StringIO):
    """What stdout is when the CLI prints to a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _colour_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(state, "no_color", False)


def test_a_table_is_left_aligned_columns_three_spaces_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table(
        ["POOL", "ACCELERATOR", "FREE", "MAX CLAIM", "HOST RAM"],
        [["training", "cpu", 4, 2, "64 GiB"], ["gpu-pool", "H100", None, 1.5, True]],
    )
    assert capsys.readouterr().out == (
        "POOL       ACCELERATOR   FREE   MAX CLAIM   HOST RAM\n"
        "training   cpu           4      2           64 GiB\n"
        "gpu-pool   H100          -      1.5         yes\n"
    )


def test_a_table_without_rows_prints_its_headers_and_keeps_an_indent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table(["KIND", "FOR", "PROJECT"], [], indent="  ")
    assert capsys.readouterr().out == "  KIND   FOR   PROJECT\n"


def test_a_piped_table_keeps_each_row_on_one_line_and_its_text_as_written(
    capsys: pytest.CaptureFixture[str],
) -> None:
    long = "x" * 500
    table(["ID", "PROMPT"], [["r1", long], ["r2", "[bold]not markup[/bold] :smile: [1, 2)"]])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "ID   PROMPT",
        f"r1   {long}",
        "r2   [bold]not markup[/bold] :smile: [1, 2)",
    ]


def test_details_align_values_after_the_longest_key(capsys: pytest.CaptureFixture[str]) -> None:
    details(
        [
            ("Run", "r-1234"),
            ("Images", True),
            ("Memory", "weights 1.0 GiB\nadapter 2.0 MiB"),
            ("Failure", None),
        ],
        indent="  ",
    )
    assert capsys.readouterr().out == (
        "  Run       r-1234\n"
        "  Images    yes\n"
        "  Memory    weights 1.0 GiB\n"
        "            adapter 2.0 MiB\n"
        "  Failure   -\n"
    )


def test_details_without_rows_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    details([])
    assert capsys.readouterr().out == ""


def test_a_terminal_gets_bold_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    table(["RUN", "PHASE"], [["r1", "TRAINING"]])
    assert "\x1b[1m" in out.getvalue()
    assert "TRAINING" in out.getvalue()


@pytest.mark.parametrize("switch", ["flag", "env"])
def test_no_color_prints_a_terminal_no_styling(
    monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    if switch == "flag":
        monkeypatch.setattr(state, "no_color", True)
    else:
        monkeypatch.setenv("NO_COLOR", "1")
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    table(["RUN", "PHASE"], [["r1", "TRAINING"]])
    details([("Phase", "TRAINING")])
    assert out.getvalue() == "RUN   PHASE\nr1    TRAINING\nPhase   TRAINING\n"


def test_a_terminal_table_fits_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr(state, "no_color", True)
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    table(["ID", "PROMPT"], [["r1", "word " * 30]])
    lines = out.getvalue().splitlines()
    assert len(lines) > 2
    assert max(len(line) for line in lines) <= 40


def test_the_cli_modules_import_no_table_renderer_and_no_settings_loader() -> None:
    # httpx imports rich.table itself (its optional command line, `httpx._main`, loads when
    # click and rich are installed); blocking that shows what the CLI's own modules import.
    code = (
        "import sys, pkgutil, importlib\n"
        "sys.modules['httpx._main'] = None\n"
        "import akka_training.cli as c\n"
        "for m in pkgutil.walk_packages(c.__path__, 'akka_training.cli.'):\n"
        "    if m.name != 'akka_training.cli.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "print(sorted(m for m in ('rich.table', 'pydantic_settings') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_runs_snapshots_table_shows_what_each_part_holds_in_the_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from akka_training.api.runs import Snapshot
    from akka_training.cli.training.runs import _print_snapshots

    base = {"run": "r1", "attempt": 1, "weights": "w/", "createdAt": "2026-01-01T00:00:00+00:00"}
    rows = [
        Snapshot.model_validate({**base, "name": "step-2", "step": 2, "trainingState": "t/",
                                 "swept": False}),
        Snapshot.model_validate({**base, "name": "step-4", "step": 4, "trainingState": "t/",
                                 "weightsBytes": 1536, "trainingStateBytes": 3 * 2**20,
                                 "swept": False}),
        Snapshot.model_validate({**base, "name": "step-6", "step": 6, "trainingState": None,
                                 "weightsBytes": 1536, "swept": False}),
    ]  # fmt: skip
    _print_snapshots(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == ["SNAPSHOT", "STEP", "ATTEMPT", "WEIGHTS", "TRAINING", "STATE"]
    assert lines[1].split()[3:5] == ["yes", "yes"]  # stored, size not measured
    assert lines[2].split()[3:7] == ["1.5", "KiB", "3.0", "MiB"]
    assert lines[3].split()[3:6] == ["1.5", "KiB", "no"]


def _rich_for_a_pipe(grid: list[list[str]], header: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    _print(rich_grid(grid, header), "")
    monkeypatch.undo()
    return out.getvalue()


def _random_cell(rng: random.Random) -> str:
    alphabet = string.ascii_letters + string.digits + string.punctuation + "    "
    return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 0, 1, 3, 8, 20])))


def test_a_piped_grid_of_plain_text_is_written_as_rich_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipe gets its tables and details from `plain_lines`, without rich: the same text."""
    rng = random.Random(20)
    grids = [
        [["RUN", "PHASE"]],
        [["A", "B", "C"], ["", "", ""], ["  lead", "trail  ", " both "]],
        [["ONLY"], ["x" * 300], [""]],
        [["K", ""], ["", ""]],
    ]
    for _ in range(200):
        columns, rows = rng.randint(1, 6), rng.randint(0, 6)
        grids.append([[_random_cell(rng) for _ in range(columns)] for _ in range(rows + 1)])
    for grid in grids:
        lines = plain_lines(grid)
        assert lines is not None
        plain = "".join(line.rstrip() + "\n" for line in lines)
        for header in (True, False):
            assert plain == _rich_for_a_pipe(grid, header, monkeypatch), grid


@pytest.mark.parametrize(
    "text", ["tab\there", "two\nlines", "caf\u00e9", "\u6f22\u5b57", "bell\x07", "cr\r"]
)
def test_text_rich_measures_or_strips_is_left_to_rich(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert plain_lines([["NAME", "VALUE"], ["key", text]]) is None
    details([("Key", text), ("Other", "x")])
    assert capsys.readouterr().out.splitlines()[0].startswith("Key     ")


def _printed(monkeypatch: pytest.MonkeyPatch, show: Callable[..., None], *args: Any) -> str:
    out = _Terminal()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdout", out)
        show(*args)
    return out.getvalue()


# Each terminal renders some 700 tables with rich (seconds of CPU): the fast layer takes one
# terminal plain_lines writes for and one rich alone writes for, the full suite every one.
MORE_TERMINALS = pytest.mark.slow


@pytest.mark.parametrize(
    "term",
    [
        "xterm-256color",
        "dumb",
        pytest.param("xterm", marks=MORE_TERMINALS),
        pytest.param("screen", marks=MORE_TERMINALS),
        pytest.param("", marks=MORE_TERMINALS),
        pytest.param("unknown", marks=MORE_TERMINALS),
        pytest.param("xterm truecolor", marks=MORE_TERMINALS),
    ],
)
@pytest.mark.parametrize("colour", [True, False])
def test_a_terminal_gets_from_plain_lines_what_rich_writes_to_it(
    monkeypatch: pytest.MonkeyPatch, term: str, colour: bool
) -> None:
    """A terminal's tables and details come from `plain_lines` where it can write what rich
    writes (bold headers included), at any width: the same text as rich's."""
    name, _, colorterm = term.partition(" ")
    monkeypatch.setenv("TERM", name)
    monkeypatch.setenv("COLORTERM", colorterm)
    monkeypatch.setattr(state, "no_color", not colour)
    rng = random.Random(f"{term}{colour}")
    grids = [[["RUN", "PHASE"], ["r1", "TRAINING"]], [["ONE"]], [["A", "B"], ["", ""]]]
    for _ in range(40):
        columns, rows = rng.randint(1, 5), rng.randint(0, 4)
        titles = [_random_cell(rng) or "H" for _ in range(columns)]
        grids.append([titles, *([_random_cell(rng) for _ in range(columns)] for _ in range(rows))])
    for grid in grids:
        natural = sum(max(len(row[i]) for row in grid) for i in range(len(grid[0])))
        natural += COLUMN_GAP * (len(grid[0]) - 1)
        for width in (natural - 1, natural, natural + 1, 80):
            monkeypatch.setenv("COLUMNS", str(max(width, 1) + 2))
            for header in (True, False):
                ours = _printed(monkeypatch, _grid, grid, "  ", header)
                theirs = _printed(monkeypatch, _print, rich_grid(grid, header), "  ")
                assert ours == theirs, (grid, width, header)


def test_a_non_finite_figure_prints_as_the_service_sends_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table(["STEP", "LOSS", "GRAD_NORM"], [[2, float("nan"), float("-inf")]])
    assert capsys.readouterr().out.split() == ["STEP", "LOSS", "GRAD_NORM", "2", "NaN", "-Infinity"]
    # -o json: JSON has no NaN, so the text (what a JSON reader of the API gets too).
    monkeypatch.setattr(state, "output", "json")
    emit({"loss": float("nan"), "reward": float("inf")}, print)
    assert json.loads(capsys.readouterr().out) == {"loss": "NaN", "reward": "Infinity"}
