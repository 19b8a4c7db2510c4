"""The dense peak FLOP/s of known GPUs, by name and precision: what MFU divides by (`flops`)
and what the reward preview's step-time estimate assumes (`tasks.estimate`). No torch."""

from __future__ import annotations

import re

# Dense (no sparsity) peak TFLOP/s per GPU, by the words of the CUDA device name ("NVIDIA H100
# PCIe" holds the words H100 and PCIE), most specific first, and by precision (FP32 without TF32).
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 NVL", {"BF16": 835.0, "FP16": 835.0, "FP32": 60.0}),
    ("H100 PCIe", {"BF16": 756.0, "FP16": 756.0, "FP32": 51.0}),
    ("H100", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("GH200", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("H200", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("H800", {"BF16": 989.0, "FP16": 989.0, "FP32": 67.0}),
    ("A100", {"BF16": 312.0, "FP16": 312.0, "FP32": 19.5}),
    ("A800", {"BF16": 312.0, "FP16": 312.0, "FP32": 19.5}),
    ("L40S", {"BF16": 362.0, "FP16": 362.0, "FP32": 91.6}),
    ("L4", {"BF16": 121.0, "FP16": 121.0, "FP32": 30.3}),
    ("A10", {"BF16": 125.0, "FP16": 125.0, "FP32": 31.2}),
    ("V100", {"FP16": 125.0, "FP32": 15.7}),
)


def peak_flops_by_name(name: str, precision: str) -> float | None:
    words = set(re.split(r"[\s\-_]+", name.upper()))
    for marker, peaks in PEAK_TFLOPS:
        if set(marker.upper().split()) <= words:
            tflops = peaks.get(precision)
            return None if tflops is None else tflops * 1e12
    return None
