"""`until`, the one way a test waits for what another thread or process makes happen."""

from __future__ import annotations

import threading

import pytest

from akka_training.testing.waiting import until


def test_until_returns_the_first_truthy_value() -> None:
    answers = iter([None, 0, "", "ready"])

    assert until(lambda: next(answers), what="an answer", interval=0) == "ready"


def test_until_sees_what_another_thread_does() -> None:
    seen: list[int] = []
    thread = threading.Thread(target=seen.append, args=(7,))
    thread.start()

    assert until(lambda: seen, what="the thread to append", timeout=30) == [7]
    thread.join()


def test_until_names_what_it_waited_for_and_the_last_value_seen() -> None:
    with pytest.raises(AssertionError) as raised:
        until(lambda: [], what="the queue to fill", timeout=0, interval=0)

    assert str(raised.value) == "gave up after 0 s waiting for the queue to fill; last seen: []"


def test_until_adds_the_detail_it_reads_when_the_wait_runs_out() -> None:
    log = ["starting"]

    with pytest.raises(AssertionError) as raised:
        until(
            lambda: None,
            what="the trainer",
            timeout=0,
            interval=0,
            detail=lambda: "\n".join(log),
        )

    assert str(raised.value) == (
        "gave up after 0 s waiting for the trainer; last seen: None\nstarting"
    )


def test_until_treats_the_exceptions_it_is_told_to_ignore_as_not_yet() -> None:
    calls = iter([ConnectionRefusedError("not listening"), None, "up"])

    def probe() -> str | None:
        answer = next(calls)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert until(probe, what="the server", ignoring=(ConnectionError,), interval=0) == "up"


def test_until_reports_the_last_ignored_exception_when_the_wait_runs_out() -> None:
    def probe() -> None:
        raise ConnectionRefusedError("not listening")

    with pytest.raises(
        AssertionError, match=r"last seen: ConnectionRefusedError\('not listening'\)"
    ):
        until(probe, what="the server", ignoring=(ConnectionError,), timeout=0, interval=0)


def test_until_lets_other_exceptions_through() -> None:
    def probe() -> None:
        raise KeyError("run")

    with pytest.raises(KeyError):
        until(probe, what="the run", ignoring=(ConnectionError,), interval=0)
