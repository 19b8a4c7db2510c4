"""A step's figures: the flat mapping of names to numbers a job reports for each step
(`core.reports.StepReport.metrics`), which the service keeps (`steps.metrics`) and
`runs metrics` shows as it came.

The names are the job's (`telemetry.figures` maps each to its metric; docs/observability.md
lists them). `Figures` types the ones the service reads itself, and reads the families whose
names carry a part (``memory/<part>``, ``terms/<term>/share_mean``, ``health/...``) by their
prefix, so no reader spells a figure's name.

A figure need not be finite: a diverging run's loss is NaN. JSON has no such numbers, so a
non-finite figure travels and is kept as the text ``"NaN"``, ``"Infinity"`` or
``"-Infinity"`` (`json_safe`: the job's reports, the service's columns and answers); pydantic
reads those texts back as the floats they name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from akka_training.core.monitors import WATCHED

__all__ = ["Figures", "json_safe", "non_finite_text"]


def non_finite_text(value: float) -> str:
    """A non-finite number as JSON-minded readers (JavaScript, pydantic) spell it."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float, at any depth of dicts, lists and tuples, as its
    text (`non_finite_text`), so that strict JSON (``allow_nan=False``, Postgres) takes it.
    Anything else is returned as it is."""
    if isinstance(value, float):
        return value if math.isfinite(value) else non_finite_text(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


class Figures(BaseModel):
    """One step's figures. Every figure stays as it was reported (`named` gives them back);
    the fields below are the ones the service reads by name, None where the step has none."""

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        # Built when a step is first read: the CLI imports `core` for its types.
        defer_build=True,
    )
    # Every other figure, by its name.
    __pydantic_extra__: dict[str, float] = Field(init=False)

    loss: float | None = Field(None, alias="loss", description="The training loss (sft, dpo).")
    eval_loss: float | None = Field(None, alias="eval_loss")
    reward_mean: float | None = Field(None, alias="reward/mean")
    tokens: float | None = Field(None, alias="tokens", description="Tokens the step trained on.")
    mfu: float | None = Field(None, alias="mfu", description="Model FLOPs utilisation, 0 to 1.")
    padding_share: float | None = Field(None, alias="padding_share")
    step_seconds: float | None = Field(None, alias="timing/step")
    update_seconds: float | None = Field(
        None, alias="timing/update", description="The optimizer update alone, where measured."
    )

    @classmethod
    def of(cls, metrics: Mapping[str, float]) -> Figures:
        """The figures of a report's or a kept step's mapping."""
        return cls.model_validate(metrics)

    def named(self) -> dict[str, float]:
        """Every figure under its own name, as the job reported it."""
        return self.model_dump(by_alias=True, exclude_none=True)

    def memory(self) -> dict[str, float]:
        """The step's memory split by part (``memory/reserved`` as ``reserved``)."""
        return self._family("memory/")

    def term_shares(self) -> dict[str, float]:
        """Each reward term's mean weighted share (``terms/<term>/share_mean``)."""
        return {
            name.removesuffix("/share_mean"): value
            for name, value in self._family("terms/").items()
            if name.endswith("/share_mean")
        }

    def preference(self) -> dict[str, float]:
        """A dpo step's preference figures (``rewards/...`` and ``logps/...``)."""
        return {
            name: value
            for name, value in self.named().items()
            if name.startswith(("rewards/", "logps/"))
        }

    def health(self) -> dict[str, float]:
        """The figures the health monitors watch, and every ``health/...`` figure."""
        return {
            name: value
            for name, value in self.named().items()
            if name in WATCHED or name.startswith("health/")
        }

    def _family(self, prefix: str) -> dict[str, float]:
        return {
            name.removeprefix(prefix): value
            for name, value in self.named().items()
            if name.startswith(prefix)
        }
