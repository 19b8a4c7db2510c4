"""What the client refuses before it sends: a body JSON cannot carry."""

from __future__ import annotations

import pytest

from akka_training.client import TrainerClient
from akka_training.core.errors import InvalidRequest


def test_a_plan_with_nan_is_refused_before_any_request() -> None:
    # Nothing listens on port 9: the refusal must come before a connection is tried.
    client = TrainerClient("http://127.0.0.1:9", token="unused")
    plan = {"kind": "run", "config": {"rlHyperparams": {"temperature": float("nan")}}}
    with pytest.raises(InvalidRequest) as refused:
        client.start_run(plan, dry_run=True)
    assert refused.value.message == (
        "The request holds .nan or .inf (float('nan'), float('inf')), which a plan cannot hold "
        "and JSON cannot carry; write a finite number."
    )
