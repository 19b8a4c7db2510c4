"""The error tree shared by the service, the client and the CLI.

    AkkaError                      code             HTTP
    ├── InvalidRequest             invalid          400
    │   └── PlanRefused            plan-refused     422  (carries every problem at once)
    ├── Unauthorized               unauthorized     401
    ├── Forbidden                  forbidden        403
    ├── NotFound                   not-found        404
    ├── Conflict                   conflict         409
    ├── PayloadTooLarge            too-large        413
    ├── QuotaExceeded              quota            429
    ├── ServiceUnavailable         unavailable      503
    └── TrainerUnreachable         unreachable      --   (raised by the client only)

The service turns any `AkkaError` into one JSON shape, ``{"error": {"code", "message",
"problems"}}``; the client rebuilds the same exception from the code; the CLI prints the message
and exits 1.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any, ClassVar

from akka_training.core.limits import MAX_PROBLEMS


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a submission: the field it concerns and what to do instead."""

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class AkkaError(Exception):
    code: ClassVar[str] = "error"
    status: ClassVar[int] = 500

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems or [])

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.problems:
            body["problems"] = [p.to_json() for p in self.problems]
        return {"error": body}


class InvalidRequest(AkkaError):
    code = "invalid"
    status = 400


class PlanRefused(InvalidRequest):
    code = "plan-refused"
    status = 422

    def __init__(self, problems: list[Problem], what: str = "plan") -> None:
        shown = listed(problems)
        lines = "\n".join(f"  - {p.message}" for p in shown)
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"The {what} was refused ({len(problems)} {noun}):\n{lines}", shown)
        # Every problem, where `problems` lists the first ones.
        self.all_problems = list(problems)


def listed(problems: list[Problem]) -> list[Problem]:
    """At most `MAX_PROBLEMS` problems, the last one counting those left out: a submission
    with a million unknown fields is refused in a few lines."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    left = len(problems) - (MAX_PROBLEMS - 1)
    return [*problems[: MAX_PROBLEMS - 1], Problem("", f"... and {left} more problems")]


class Unauthorized(AkkaError):
    code = "unauthorized"
    status = 401


class Forbidden(AkkaError):
    code = "forbidden"
    status = 403


class NotFound(AkkaError):
    code = "not-found"
    status = 404


class Conflict(AkkaError):
    code = "conflict"
    status = 409


class PayloadTooLarge(AkkaError):
    code = "too-large"
    status = 413


class QuotaExceeded(AkkaError):
    """What the request needs started (an endpoint) cannot be admitted now: its project's quota
    (`reason` "quota") or its pool's free devices (`reason` "pool") do not allow it."""

    code = "quota"
    status = 429

    def __init__(
        self, message: str, problems: list[Problem] | None = None, reason: str = "quota"
    ) -> None:
        super().__init__(message, problems)
        self.reason = reason


class ServiceUnavailable(AkkaError):
    """Something the service needs is busy or away for now; `retry_after` (seconds), when set,
    is sent as the answer's ``Retry-After`` header, after which the same request may succeed."""

    code = "unavailable"
    status = 503

    def __init__(
        self, message: str, problems: list[Problem] | None = None, retry_after: int | None = None
    ) -> None:
        super().__init__(message, problems)
        self.retry_after = retry_after


class TrainerUnreachable(AkkaError):
    code = "unreachable"
    status = 0


class StorageFull(AkkaError):
    """The trainer's storage has no space left (HTTP 507, Insufficient Storage)."""

    code = "storage-full"
    status = 507


# errno values that mean the storage has no room: no space left, a disk quota exceeded.
_FULL = (errno.ENOSPC, errno.EDQUOT)


def storage_full(exc: BaseException) -> OSError | None:
    """The OSError saying that storage is full, in `exc` or an exception it wraps, or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return current
        current = current.__cause__ or current.__context__
    return None


_BY_CODE: dict[str, type[AkkaError]] = {
    cls.code: cls
    for cls in (
        AkkaError,
        InvalidRequest,
        PlanRefused,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        PayloadTooLarge,
        QuotaExceeded,
        ServiceUnavailable,
        TrainerUnreachable,
        StorageFull,
    )
}


def error_from_json(body: dict[str, Any], status: int) -> AkkaError:
    """Rebuild the exception the service raised from its JSON body."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return AkkaError(f"The trainer answered HTTP {status} without an error body.")
    problems = [Problem(p.get("field", ""), p.get("message", "")) for p in err.get("problems", [])]
    cls = _BY_CODE.get(str(err.get("code")), AkkaError)
    message = str(err.get("message", f"HTTP {status}"))
    if cls is PlanRefused:
        refused = PlanRefused.__new__(PlanRefused)
        AkkaError.__init__(refused, message, problems)
        refused.all_problems = problems  # what the service listed
        return refused
    return cls(message, problems)
