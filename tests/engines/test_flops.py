"""MFU: the FLOPs approximation and the table of device peaks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from akka_training.engines.flops import flop_parameters, mfu, peak_flops, peak_flops_by_name

if TYPE_CHECKING:
    import torch


def tiny_lm(tied: bool) -> torch.nn.Module:
    import torch

    class TinyLm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(100, 8)
            self.body = torch.nn.Linear(8, 8)
            self.head = torch.nn.Linear(8, 100, bias=False)
            if tied:
                self.head.weight = self.embed.weight

        def get_output_embeddings(self) -> torch.nn.Module:
            return self.head

    return TinyLm()


def test_peaks_come_from_the_device_name_and_precision() -> None:
    import torch

    assert peak_flops_by_name("NVIDIA H100 80GB HBM3", "BF16") == 989e12
    assert peak_flops_by_name("NVIDIA H100 PCIe", "BF16") == 756e12
    assert peak_flops_by_name("NVIDIA H200", "FP32") == 67e12
    assert peak_flops_by_name("NVIDIA A100-SXM4-80GB", "BF16") == 312e12
    assert peak_flops_by_name("NVIDIA L4", "BF16") == 121e12
    # Unknown devices and precisions have no peak: MFU is left out, not guessed.
    assert peak_flops_by_name("NVIDIA A10G", "BF16") is None
    assert peak_flops_by_name("Tesla V100-SXM2-16GB", "BF16") is None
    assert peak_flops(torch.device("cpu"), "FP32") is None


def test_mfu_is_six_flops_per_parameter_and_token_over_the_peak() -> None:
    untied, tied = tiny_lm(tied=False), tiny_lm(tied=True)
    assert flop_parameters(untied) == 8 * 8 + 8 + 8 * 100  # the embedding table is left out
    assert flop_parameters(tied) == 8 * 8 + 8 + 8 * 100  # ...but as a tied head it counts

    assert mfu(1_000_000, 1000, 2.0, 1e12) == pytest.approx(6 * 1e9 / 2 / 1e12)
    assert mfu(1_000_000, 1000, 2.0, None) is None
