"""The SFT fast path on a GPU, decided from the device, the installed kernels and memory; a plan
that asks for Liger where it cannot run is refused with its words."""

from __future__ import annotations

import pytest

from akka_training.engines.failures import JobStartFailed
from akka_training.engines.trl.sft_speed import (
    SftSpeed,
    activation_bytes,
    needs_checkpointing,
    sft_speed,
)

GIB = 2**30


def test_a_cpu_run_keeps_trls_defaults() -> None:
    speed = sft_speed(None, cuda=False, image_text=False, flash_attention=False, liger=False)

    assert speed == SftSpeed(False, None, False, None)


def test_a_gpu_with_flash_attention_trains_padding_free() -> None:
    speed = sft_speed(
        None,
        cuda=True,
        image_text=False,
        flash_attention=True,
        liger=False,
        weight_bytes=GIB,
        activations=GIB,
        device_bytes=80 * GIB,
    )

    assert speed.padding_free
    assert speed.attn_implementation == "flash_attention_2"
    assert speed.gradient_checkpointing is False


def test_without_flash_attention_or_for_image_text_batches_stay_padded() -> None:
    for flash, image_text in ((False, False), (True, True)):
        speed = sft_speed(
            None, cuda=True, image_text=image_text, flash_attention=flash, liger=False
        )
        assert not speed.padding_free
        assert speed.attn_implementation is None


def test_gradient_checkpointing_turns_on_where_memory_asks_for_it() -> None:
    # A 0.5B-class model (hidden 896, 24 layers), 8 rows of 2048 tokens: about 11 GiB.
    activations = activation_bytes(8, 2048, 896, 24)
    assert 10 * GIB < activations < 12 * GIB

    assert not needs_checkpointing(GIB, activations, 80 * GIB)
    assert needs_checkpointing(GIB, activations, 12 * GIB)
    speed = sft_speed(
        None,
        cuda=True,
        image_text=False,
        flash_attention=False,
        liger=False,
        weight_bytes=GIB,
        activations=activations,
        device_bytes=12 * GIB,
    )
    assert speed.gradient_checkpointing is True


def test_liger_runs_on_a_gpu_that_has_it() -> None:
    speed = sft_speed("liger", cuda=True, image_text=False, flash_attention=False, liger=True)

    assert speed.liger


def test_liger_on_a_cpu_is_refused_with_what_to_change() -> None:
    with pytest.raises(JobStartFailed) as refused:
        sft_speed("liger", cuda=False, image_text=False, flash_attention=False, liger=True)

    assert str(refused.value) == (
        "config.hyperparams.training.kernels is liger, but this job runs on a CPU and Liger's "
        "kernels run on GPUs only: remove kernels from the plan or run it on a GPU pool"
    )


def test_liger_without_the_package_is_refused_with_what_to_install() -> None:
    with pytest.raises(JobStartFailed) as refused:
        sft_speed("liger", cuda=True, image_text=False, flash_attention=True, liger=False)

    assert str(refused.value) == (
        "config.hyperparams.training.kernels is liger, but the job's Python environment has no "
        "liger-kernel: install liger-kernel beside the trainer or remove kernels from the plan"
    )
