"""`runs verify`: a reinforcement run's published figures against their recomputation from the
rollouts it kept."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import ResponseBody


class VerifiedStep(ResponseBody):
    step: int
    rollouts: int = Field(description="How many kept rollouts the figures were recomputed from.")
    figures: int = Field(description="How many published figures were compared.")


class FigureDifference(ResponseBody):
    step: int
    figure: str = Field(description="The figure's name, as `runs metrics` shows it.")
    published: float | None = Field(description="None: the step published no such figure.")
    recomputed: float | None = Field(description="None: the step kept no rollouts to recompute.")


class RunVerification(ResponseBody):
    """Every step with kept rollouts, and each figure whose published value differs from its
    recomputation (none: the run's figures are what its rollouts say)."""

    run: str
    steps: list[VerifiedStep]
    differences: list[FigureDifference]
