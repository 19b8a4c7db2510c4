"""Health, the trainer's configuration, logins and tokens."""

from __future__ import annotations

from pydantic import Field

from akka_training.api.base import RequestBody, ResponseBody, Timestamp
from akka_training.core.bounds import ModelName, Name, Number
from akka_training.core.limits import (
    MAX_TOKEN_DAYS,
    MAX_TOKEN_PROJECTS,
    MIN_TOKEN_DAYS,
    REFERENCE_CHARS,
)


class Health(ResponseBody):
    status: str


class Info(ResponseBody):
    """The trainer's configuration and build, as `akka training info` shows it."""

    version: str
    engine: str = Field(description="The reinforcement engine: verl or trl.")
    engines: dict[str, str] = Field(
        default_factory=dict,
        description="The engine each method trains on: sft and dpo on trl, grpo and gspo on "
        "the reinforcement engine.",
    )
    backend: str = Field(description="The cluster backend: local, ray, ...")
    database: str
    storage: str
    telemetry: str
    startup: str
    image_text_reinforcement: bool
    datasets_max_bytes: int
    pools: list[str]
    default_pool: str | None


class ExchangeRequest(RequestBody):
    login: str = Field(max_length=REFERENCE_CHARS, description="An admin or project token.")


class Token(ResponseBody):
    id: str
    name: str
    kind: str = Field(description="admin or project.")
    projects: list[str] | None = Field(description="None for an admin token: every project.")
    created_at: Timestamp | None
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    last_used_at: Timestamp | None


class CreatedToken(Token):
    token: str = Field(description="The secret: shown once, at creation.")


class Exchanged(ResponseBody):
    """A short-lived access token exchanged for a login."""

    access_token: str
    expires_at: Timestamp
    login: Token


class WhoAmI(ResponseBody):
    token_id: str
    name: str
    kind: str = Field(description="admin, project, access or job.")
    projects: list[str] | None = Field(description="None: every project.")


class TokenRequest(RequestBody):
    name: ModelName
    projects: list[Name] = Field(default_factory=list, max_length=MAX_TOKEN_PROJECTS)
    admin: bool = False
    expires_in_days: Number | None = Field(
        None,
        ge=MIN_TOKEN_DAYS,
        le=MAX_TOKEN_DAYS,
        description=f"Days until the token expires, at least {MIN_TOKEN_DAYS:.4f} (an hour) and "
        f"at most {MAX_TOKEN_DAYS}; None: it does not expire.",
    )
