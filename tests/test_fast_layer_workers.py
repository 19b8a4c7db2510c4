"""The fast layer and the full suite run on two workers; other selections in one process."""

from __future__ import annotations

import pytest

from akka_training.testing.fast_layer import workers_for


@pytest.mark.parametrize(
    "args",
    [
        [],  # the full suite
        ["-q", "-ra"],
        ["-m", "not slow"],
        ["-m", "not slow", "-q", "-p", "no:cacheprovider"],
        ["-q", "--markexpr=not slow", "-x"],
    ],
)
def test_the_fast_layer_and_the_full_suite_get_two_workers(args: list[str]) -> None:
    assert workers_for(args, {}) == 2


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "slow"],
        ["-m", "not slow", "tests/cli"],
        ["-m", "not slow", "-n", "4"],
        ["-m", "not slow", "-p", "no:xdist"],
        ["tests/cli/test_errors.py::test_an_unknown_command_is_a_usage_error"],
    ],
)
def test_any_other_run_stays_in_one_process(args: list[str]) -> None:
    assert workers_for(args, {}) == 0


def test_the_variable_sets_the_workers_or_turns_them_off() -> None:
    assert workers_for(["-m", "not slow"], {"AKKA_FAST_LAYER_WORKERS": "0"}) == 0
    assert workers_for(["-m", "not slow"], {"AKKA_FAST_LAYER_WORKERS": "3"}) == 3
