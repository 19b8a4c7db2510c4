"""What bench/controller_pass.py and bench/reads_under_load.py both submit: a catalog of the
scripted tiny model, a small arithmetic chat dataset, and an SFT plan of some steps."""

from __future__ import annotations

import json
from typing import Any

CATALOG = [
    {
        "id": "tiny-chat",
        "path": "/nonexistent/tiny-chat",
        "context-length": 2048,
        "envelopes": [
            {"method": "sft", "engine": "trl", "gpus": 1, "precision": "FP32", "host-memory-gib": 1}
        ],
    }
]
ROWS = "".join(
    json.dumps(
        {
            "messages": [
                {"role": "user", "content": f"What is {a} + {b}?"},
                {"role": "assistant", "content": f"#### {a + b}"},
            ]
        }
    )
    + "\n"
    for a in range(1, 9)
    for b in range(1, 6)
)


def sft_plan(steps: int, submission: str) -> dict[str, Any]:
    return {
        "kind": "run",
        "project": "bench",
        "baseModel": "tiny-chat",
        "submissionId": submission,
        "config": {
            "dataset": "bench/train",
            "method": "sft",
            "maxSeqLength": 256,
            "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}},
        },
        "execution": {"gpus": 1, "saveEvery": 5},
    }
