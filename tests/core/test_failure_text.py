"""Out-of-memory reasons name only the settings of the run's method."""

from __future__ import annotations

from akka_training.core.failures import FailureReason, failure_text


def test_a_reinforcement_run_out_of_host_memory_is_told_its_own_settings() -> None:
    text = failure_text(FailureReason.HOST_OOM, "host memory ran out", "grpo")
    assert text.splitlines()[0] == (
        "this run ran out of host memory; lower config.rlHyperparams.generationsPerPrompt, "
        "promptsPerStep or maxCompletionTokens, or config.maxSeqLength, run fewer GPUs per node, "
        "or use a pool with more HOST RAM"
    )
    assert "batchSize" not in text


def test_an_sft_run_out_of_device_memory_is_told_its_batch() -> None:
    assert failure_text(FailureReason.DEVICE_OOM, None, "sft") == (
        "this run ran out of device memory (GPU memory); lower "
        "config.hyperparams.training.batchSize or config.maxSeqLength, or use a larger GPU"
    )
    assert "rlHyperparams" not in failure_text(FailureReason.DEVICE_OOM, None, "sft")


def test_reasons_without_a_remedy_in_the_settings_are_their_sentence() -> None:
    assert failure_text(FailureReason.JOB_LOST, None, "sft") == FailureReason.JOB_LOST.sentence
