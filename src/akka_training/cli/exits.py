"""The exit statuses of `akka`, one meaning each, so that a script can branch on them.

    0  the command did what it was asked
    1  the operation failed or was refused (a refused plan, a run that did not complete with
       --exit-status, a conflict, anything unexpected)
    2  the command line is wrong (an unknown command or option, a missing argument, a bad value)
    3  the trainer could not be reached (nothing answers at its URL, or it timed out)
    4  what the command names does not exist (a run, dataset, project, snapshot)
    5  the trainer refused the credentials (no login, an expired or revoked token, no access)

`docs/cli.md` lists the same table; a test keeps the two equal.
"""

from __future__ import annotations

from akka_training.core.errors import (
    AkkaError,
    Forbidden,
    NotFound,
    TrainerUnreachable,
    Unauthorized,
)

OK = 0
FAILED = 1
USAGE = 2
UNREACHABLE = 3
NOT_FOUND = 4
NOT_AUTHORISED = 5

CODES: dict[int, str] = {
    OK: "the command did what it was asked",
    FAILED: "the operation failed or was refused",
    USAGE: "the command line is wrong",
    UNREACHABLE: "the trainer could not be reached",
    NOT_FOUND: "what the command names does not exist",
    NOT_AUTHORISED: "the trainer refused the credentials",
}


def status_of(error: AkkaError) -> int:
    """The exit status an error of the trainer (or of the client) ends the command with."""
    if isinstance(error, TrainerUnreachable):
        return UNREACHABLE
    if isinstance(error, NotFound):
        return NOT_FOUND
    if isinstance(error, Unauthorized | Forbidden):
        return NOT_AUTHORISED
    return FAILED
