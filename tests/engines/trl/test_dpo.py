"""Preference fine-tuning jobs end to end: a real TRL DPO run on the tiny chat model, reporting
to a recording HTTP server, with a temporary blob store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from akka_training.core.resolved import SourcePin
from tests.engines.conftest import ReportServer
from tests.engines.jobs import make_spec, put_dataset, run_in_process
from tests.engines.rows import chat_rows, pair_rows

# Every test here trains a real job.
pytestmark = pytest.mark.slow

DPO: dict[str, Any] = {
    "method": "dpo",
    "maxSeqLength": 64,
    "hyperparams": {
        "lora": {"rank": 4, "alpha": 8},
        "optimizer": {"learningRate": 5e-3},
        "training": {"maxSteps": 3, "batchSize": 4},
    },
}
PREFERENCE = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
)


def test_a_dpo_run_from_the_base_model_reports_its_preference_figures(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    spec = make_spec(
        model=catalog["tiny-chat"],
        dataset=put_dataset(store, "pairs", pair_rows(12)),
        config=DPO,
        trainer_url=report_server.url,
        store=store,
        execution={"saveEvery": 2},
    )

    assert run_in_process(spec, tmp_path / "job") == 0

    training = report_server.of("training")[0]
    assert training["totalSteps"] == 3
    assert training["dataFit"] == {
        "rows": 12,
        "rowsTruncated": 0,
        "answersTruncated": 0,
        "rowsDropped": 0,
        "maxSeqLength": 64,
        "promptsTruncated": 0,
    }
    steps = report_server.of("steps")
    assert [s["step"] for s in steps] == [1, 2, 3]
    for s in steps:
        assert set(PREFERENCE) <= set(s["metrics"]), s["metrics"]
    # The reference is the base model (the adapter disabled), and a fresh adapter changes
    # nothing yet: the first step's rewards are exactly 0.
    first = steps[0]["metrics"]
    assert (first["rewards/chosen"], first["rewards/rejected"]) == (0.0, 0.0)
    assert [s["step"] for s in report_server.of("snapshots")] == [2]
    assert store.list("runs/run-1/adapter/") == [
        "runs/run-1/adapter/adapter_config.json",
        "runs/run-1/adapter/adapter_model.safetensors",
    ]


def test_a_dpo_run_from_an_sft_adapter_takes_that_adapter_as_its_reference(
    catalog: dict[str, dict[str, Any]], report_server: ReportServer, store: Any, tmp_path: Path
) -> None:
    model = catalog["tiny-chat"]
    sft = make_spec(
        model=model,
        dataset=put_dataset(store, "maths", chat_rows(16)),
        config={
            "method": "sft",
            "maxSeqLength": 64,
            "hyperparams": {
                "lora": {"rank": 4, "alpha": 8},
                "optimizer": {"learningRate": 5e-2},
                "training": {"maxSteps": 4, "batchSize": 4},
            },
        },
        trainer_url=report_server.url,
        store=store,
        run_id="sft",
    )
    assert run_in_process(sft, tmp_path / "sft") == 0
    pairs = put_dataset(store, "pairs", pair_rows(12))

    def dpo(run_id: str, source: SourcePin | None) -> dict[str, float]:
        spec = make_spec(
            model=model,
            dataset=pairs,
            config={**DPO, "hyperparams": {**DPO["hyperparams"], "lora": {"rank": 4, "alpha": 8}}},
            trainer_url=report_server.url,
            store=store,
            run_id=run_id,
            source=source,
        )
        report_server.reports.clear()
        assert run_in_process(spec, tmp_path / run_id) == 0
        first: dict[str, float] = report_server.of("steps")[0]["metrics"]
        return first

    warm = SourcePin(
        kind="warm-start",
        run="sft",
        snapshot=None,
        step=4,
        weights="runs/sft/adapter/",
        lora_rank=4,
        lora_alpha=8,
    )
    from_base = dpo("from-base", None)
    from_sft = dpo("from-sft", warm)

    # The policy at step 0 is the SFT adapter (its log-probabilities differ from the base
    # model's), and so is the reference: the first step's rewards are exactly 0.
    assert from_sft["logps/chosen"] != from_base["logps/chosen"]
    assert (from_sft["rewards/chosen"], from_sft["rewards/rejected"]) == (0.0, 0.0)
    assert (from_base["rewards/chosen"], from_base["rewards/rejected"]) == (0.0, 0.0)
