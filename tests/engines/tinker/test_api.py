"""The job's API of an interactive run: requests run in their seq_id order whatever order they
arrive in, the SDK is told to try again until a result is there, and only the trainer's key is
answered."""

from __future__ import annotations

import json
import threading

import httpx

from akka_training.engines.tinker.api import JSON, JobApi, RequestQueue, Result, Work
from akka_training.testing.waiting import until


def test_requests_run_in_seq_order_and_futures_answer_when_done() -> None:
    ran: list[int] = []

    def runner(work: Work) -> Result:
        ran.append(work.seq_id)
        return Result(JSON, b'{"ok": 1}')

    queue = RequestQueue("run1", runner)
    # Questions answered at once (no long poll): the test sees each try_again.
    api = JobApi(queue, "secret", hold=0.0).start()
    try:
        with httpx.Client(base_url=api.url, headers={"X-Job-Key": "secret"}) as client:
            # The second request arrives first: it waits for the first.
            second = client.post("/optim_step", content=json.dumps({"seq_id": 2}))
            assert second.json() == {"request_id": "run1:2"}
            waiting = client.post("/retrieve_future", json={"request_id": "run1:2"}).json()
            assert waiting["type"] == "try_again"
            server = threading.Thread(target=queue.serve, kwargs={"poll": 0.05}, daemon=True)
            server.start()
            client.post("/forward_backward", content=b"", headers={"X-Seq-Id": "1"})
            until(
                lambda: (
                    client.post("/retrieve_future", json={"request_id": "run1:2"}).json()
                    == {"ok": 1}
                ),
                what="the second request's result",
            )
            assert ran == [1, 2]
            unknown = client.post("/retrieve_future", json={"request_id": "run1:9"})
            assert unknown.status_code == 404
            assert "there is no request 'run1:9'" in unknown.text
            refused = httpx.post(f"{api.url}/retrieve_future", json={"request_id": "run1:1"})
            assert refused.status_code == 403
            assert "this job answers its trainer only" in refused.text
            client.post("/shutdown", content=b"{}")
            server.join(timeout=5)
            assert not server.is_alive()
    finally:
        api.close()


def test_a_failed_request_answers_its_error_and_the_queue_goes_on() -> None:
    def runner(work: Work) -> Result:
        if work.seq_id == 1:
            raise ValueError("the loss 'dro' is not supported here")
        return Result(JSON, b"{}")

    queue = RequestQueue("run1", runner)
    queue.submit(Work("forward_backward", 1, b""))
    queue.submit(Work("optim_step", 2, b"{}"))
    threading.Thread(target=queue.serve, kwargs={"poll": 0.05}, daemon=True).start()
    until(lambda: queue.result("run1:2") is not None, what="the second request")
    failed = queue.result("run1:1")
    assert failed is not None
    assert json.loads(failed.body) == {
        "error": "forward_backward failed: the loss 'dro' is not supported here",
        "category": "user",
    }
    queue.stop()


def test_a_question_about_a_running_request_waits_for_its_result() -> None:
    """The SDK asks again as soon as it is told to try again: the job holds the question until
    the result is there (up to its hold), so the asking does not busy the host."""
    release = threading.Event()

    def runner(work: Work) -> Result:
        release.wait(timeout=60)
        return Result(JSON, b'{"ok": 1}')

    asked = threading.Event()

    class Watched(RequestQueue):
        def result(self, request_id: str, wait: float = 0.0) -> Result | None:
            asked.set()
            return super().result(request_id, wait)

    queue = Watched("run1", runner)
    api = JobApi(queue, "secret", hold=60.0).start()
    server = threading.Thread(target=queue.serve, kwargs={"poll": 0.05}, daemon=True)
    server.start()
    answers: list[dict[str, int]] = []
    try:
        with httpx.Client(base_url=api.url, headers={"X-Job-Key": "secret"}, timeout=90) as client:
            client.post("/forward_backward", content=b"", headers={"X-Seq-Id": "1"})
            asking = threading.Thread(
                target=lambda: answers.append(
                    client.post("/retrieve_future", json={"request_id": "run1:1"}).json()
                )
            )
            asking.start()
            until(asked.is_set, what="the question to reach the job")
            release.set()
            asking.join(timeout=60)
            # One question, one answer: the result, never a try_again.
            assert answers == [{"ok": 1}]
            client.post("/shutdown", content=b"{}")
            server.join(timeout=5)
    finally:
        release.set()
        api.close()
