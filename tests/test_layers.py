"""The guards of the fast layer (`tests/layers.py`), run on small suites of their own by pytest
itself (`pytester`), with this suite's fixtures and hooks."""

from __future__ import annotations

import pytest

# Each case runs a suite of its own through pytest, loading the whole root conftest: seconds each.
pytestmark = pytest.mark.slow

# The suites below load this suite's root conftest as a plugin: its fixtures, hooks and guards.
CONFTEST = 'pytest_plugins = ["tests.conftest"]\n'
# ...and its markers, which the project's settings declare (a suite of its own reads none), and
# the plugins they leave out (hypothesis's, loaded after hypothesis itself, warns as an error).
INI = (
    "[pytest]\naddopts = -p no:schemathesis -p no:hypothesispytest\n"
    "markers =\n    slow\n    postgres\n    ray\n"
)


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    return pytester


def test_a_slow_fixture_without_the_marker_fails_collection(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_layer="""
        import pytest

        def test_starts_trainers(trainer_factory):
            pass

        def test_reads_postgres(postgres_server):
            pass

        @pytest.mark.slow
        def test_says_so(trainer_factory, ray_head_factory):
            pass

        @pytest.mark.postgres
        def test_says_postgres(postgres_server):
            pass
        """
    )

    result = suite.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[:3] == [
        'ERROR: Tests of the slow layer must say so, or `pytest -m "not slow"` stops being fast:',
        "  - test_layer.py::test_starts_trainers uses trainer_factory (starts trainer processes) "
        "but is not marked slow: add @pytest.mark.slow to it, or pytestmark = "
        "pytest.mark.slow to its module",
        "  - test_layer.py::test_reads_postgres uses postgres_server (talks to the Postgres "
        "server) but is not marked postgres: add @pytest.mark.postgres to it, or pytestmark = "
        "pytest.mark.postgres to its module",
    ]
    assert "test_says_so" not in result.stderr.str()


def test_a_trainer_started_by_a_module_fixture_fails_a_fast_test(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_module_trainer="""
        import pytest
        from akka_training.testing.service import TrainerProcess

        @pytest.fixture(scope="module")
        def trainer(tmp_path_factory):
            return TrainerProcess(tmp_path_factory.mktemp("trainer")).start()

        def test_talks_to_it(trainer):
            pass
        """
    )

    result = suite.runpytest_inprocess("-q", "-p", "no:cacheprovider")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*test_module_trainer.py::test_talks_to_it starts a trainer process but is not marked "
            "slow: add @pytest.mark.slow to it, or pytestmark = pytest.mark.slow to its module."
        ]
    )


def test_a_training_loop_fails_a_fast_test_and_runs_in_a_slow_one(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_training="""
        import pytest
        from transformers.trainer import Trainer

        def test_fast():
            Trainer.train(None)

        @pytest.mark.slow
        def test_slow():
            Trainer.train(None)  # reaches the real loop, which has no trainer to run
        """
    )

    result = suite.runpytest_inprocess("-q", "-p", "no:cacheprovider")

    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["*test_training.py::test_fast runs a training loop but is not marked slow*"]
    )
    assert "AttributeError" in result.stdout.str()


def test_the_postgres_half_of_the_database_fixture_is_marked(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_database="""
        def test_rows(database):
            pass
        """
    )

    for layer in ("not postgres", "not slow"):  # the fast layer runs it on SQLite only
        result = suite.runpytest_inprocess("--collect-only", "-q", "-m", layer)

        result.stdout.fnmatch_lines(
            ["test_database.py::test_rows[[]sqlite[]]", "*1/2 tests collected*"]
        )


def test_the_fast_layer_does_not_import_a_module_marked_slow_as_a_whole(
    suite: pytest.Pytester,
) -> None:
    """`-m "not slow"` would deselect every test of such a module: it is not imported at all
    (its imports can load the training stack); the full suite collects and runs it."""
    suite.makepyfile(
        test_slow_module="""
        import pytest
        raise RuntimeError("imported")

        pytestmark = [pytest.mark.postgres, pytest.mark.slow]

        def test_one():
            pass
        """,
        test_fast_module="""
        import pytest

        pytestmark = pytest.mark.postgres

        def test_two():
            pass

        @pytest.mark.slow
        def test_three():
            pass
        """,
    )

    fast = suite.runpytest_inprocess("--collect-only", "-q", "-m", "not slow")
    full = suite.runpytest_inprocess("--collect-only", "-q")

    fast.stdout.fnmatch_lines(["test_fast_module.py::test_two", "*1/2 tests collected*"])
    assert "test_slow_module" not in fast.stdout.str()
    assert full.ret == pytest.ExitCode.INTERRUPTED
    full.stdout.fnmatch_lines(["*ERROR collecting test_slow_module.py*"])
