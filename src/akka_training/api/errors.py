"""The one error shape every failed request answers with:
``{"error": {"code", "message", "problems": [{"field", "message"}]}}``.

The code names the exception of `akka_training.core.errors` the service raised (the tree is
drawn there); `ErrorBody.exception` rebuilds it, as the client does for every error.
"""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import ResponseBody
from akka_training.core.errors import AkkaError, error_from_json


class ErrorProblem(ResponseBody):
    """One thing wrong with a submission: the field it concerns and what to do instead."""

    field: str
    message: str


class ErrorDetail(ResponseBody):
    code: str = Field(
        description="invalid, plan-refused, unauthorized, forbidden, not-found, conflict, "
        "too-large, unavailable, or error (the trainer failed on the request)"
    )
    message: str = Field(description="What is wrong and what to change, for a person.")
    problems: list[ErrorProblem] = Field(
        default_factory=list,
        exclude_if=lambda problems: not problems,
        description="Every problem at once, for a refused plan or request; absent when none.",
    )


class ErrorBody(ResponseBody):
    error: ErrorDetail

    @classmethod
    def of(cls, exc: AkkaError) -> ErrorBody:
        return cls.model_validate(exc.to_json())

    def exception(self, status: int) -> AkkaError:
        """The exception the service raised, rebuilt from its code."""
        return error_from_json(self.to_json(), status)
