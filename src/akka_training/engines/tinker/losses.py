"""The built-in losses of ``forward_backward``, each the sum over a datum's target tokens (as
the Tinker API defines them), from the model's log-probabilities of the target tokens.

- ``cross_entropy``: ``-weights * logprobs``;
- ``importance_sampling``: ``-exp(logprobs - sampling_logprobs) * advantages``;
- ``ppo``: the clipped objective, the ratio clipped to ``[clip_low_threshold,
  clip_high_threshold]`` (default 0.8 and 1.2);
- ``cispo``: ``-sg(clip(ratio)) * logprobs * advantages``: the ratio, clipped to
  ``[clip_low_threshold, clip_high_threshold]`` (default 0 and 4) and with no gradient of its
  own, weighs the policy gradient of every token;
- ``dro``: ``-(logprobs * advantages - beta / 2 * (logprobs - sampling_logprobs) ** 2)``, with
  ``beta`` from ``loss_fn_config`` (the Tinker docs give it no default, so it is required).

``sampling_logprobs`` are the datum's ``loss_fn_inputs['logprobs']``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro")

# The clip thresholds when loss_fn_config gives none, by loss.
CLIPS = {"ppo": (0.8, 1.2), "cispo": (0.0, 4.0)}


class LossError(ValueError):
    """A loss the job does not compute, or inputs it lacks; the message says what to change."""


def _input(inputs: Mapping[str, torch.Tensor], name: str, loss: str) -> torch.Tensor:
    if name not in inputs:
        raise LossError(f"the {loss} loss needs loss_fn_inputs[{name!r}] in every datum")
    return inputs[name]


def _clip(loss: str, config: Mapping[str, float | str]) -> tuple[float, float]:
    low, high = CLIPS[loss]
    return (
        float(config.get("clip_low_threshold", low)),
        float(config.get("clip_high_threshold", high)),
    )


def elementwise_loss(
    loss: str,
    logprobs: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
    config: Mapping[str, float | str],
) -> torch.Tensor:
    """One value a target token; the datum's loss is their sum."""
    if loss == "cross_entropy":
        weights = inputs.get("weights")
        return -(logprobs if weights is None else logprobs * weights)
    if loss not in LOSSES:
        raise LossError(
            f"the loss {loss!r} is not supported here; use one of {', '.join(LOSSES)}, or "
            "forward_backward_custom"
        )
    sampled = _input(inputs, "logprobs", loss)
    advantages = _input(inputs, "advantages", loss)
    if loss == "dro":
        if "beta" not in config:
            raise LossError(
                "the dro loss needs its beta: pass loss_fn_config={'beta': 0.05} (or your value)"
            )
        beta = float(config["beta"])
        return -(logprobs * advantages - 0.5 * beta * (logprobs - sampled) ** 2)
    ratio = torch.exp(logprobs - sampled)
    if loss == "importance_sampling":
        return -ratio * advantages
    low, high = _clip(loss, config)
    clipped = torch.clamp(ratio, low, high)
    if loss == "cispo":
        return -clipped.detach() * logprobs * advantages
    return -torch.minimum(ratio * advantages, clipped * advantages)
