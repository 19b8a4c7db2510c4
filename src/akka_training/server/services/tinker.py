"""The Tinker API (``/tinker``): what the `tinker` SDK asks of a trainer, answered with ours.

- **Keys.** The SDK sends its key as ``X-API-Key`` and accepts only keys that start with
  ``tml-``: a key is ``tml-`` followed by a token of this trainer (a project token, an admin
  token, or a login's access token), so it is scoped and revoked like that token.
- **Sessions** live in the database (`Sessions`, `storage.models.TinkerSession`): the project
  the session trains in, its latest heartbeat, its training clients' runs and its sampling
  clients, so that a restarted trainer (or another replica) answers them. Finishing a session,
  or its heartbeat stopping, ends its runs.
- **Training clients are interactive runs** (`core.interactive`): ``create_model`` stores a run
  of method ``tinker`` in the session's project, with its claim on the pool, and the controller
  starts its job like any run's; the model id is the run id.
- **Futures.** Work is queued by the run's job in ``seq_id`` order (`engines.tinker.api`);
  request ids are ``RUN:SEQ``, so ``retrieve_future`` finds the job from the id alone.
  ``create_model``'s future (``RUN:0``) is answered here: ``try_again`` while the run waits for
  its devices and loads its model.
- Every request that names a run checks that the key may touch the run's project.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from akka_training.core.catalog import CatalogModel
from akka_training.core.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
    Unauthorized,
)
from akka_training.core.interactive import (
    INTERACTIVE_ENGINE,
    INTERACTIVE_METHOD,
    InteractiveLora,
    InteractiveSettings,
    InteractiveSource,
)
from akka_training.core.phases import TERMINAL, Phase
from akka_training.core.plans import Execution
from akka_training.deployment.context import AppContext
from akka_training.server.auth import Principal, authenticate
from akka_training.server.job_routing import JobAddress, job_address, live_address, route
from akka_training.server.services.plans import model_pin
from akka_training.server.services.runs import cancel
from akka_training.storage.db import Database
from akka_training.storage.ids import new_id
from akka_training.storage.models import Run, Snapshot, TinkerClient, TinkerSampler
from akka_training.storage.models import TinkerSession as SessionRow
from akka_training.storage.transitions import event, open_claim

log = logging.getLogger(__name__)

KEY_PREFIX = "tml-"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
WEIGHTS_PATH = re.compile(r"^tinker://([^/]+)/weights/([^/]+)$")
SAMPLER_PATH = re.compile(r"^tinker://([^/]+)/sampler_weights/([^/]+)$")
# A sampling session is ``RUN:sampler:ADAPTER``, answered by RUN's job; ADAPTER `BASE` is the
# base model alone (`engines.tinker.sampler`, `engines.generation.schema.BASE`).
SAMPLER_MARK = ":sampler:"
BASE = "__base__"


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    @classmethod
    def of(cls, body: dict[str, Any], status: int = 200) -> Answer:
        return cls(status, JSON, json.dumps(body).encode())

    @property
    def try_again(self) -> bool:
        return self.content_type == JSON and b'"type": "try_again"' in self.body


# --- keys -----------------------------------------------------------------------------------------

NO_KEY = (
    "A Tinker request needs an API key: 'tml-' followed by a token of this trainer, as "
    "api_key= or TINKER_API_KEY (create one with `akka auth tokens create NAME --project P`)."
)


def principal_of(session: Session, key: str) -> Principal:
    if not key.startswith(KEY_PREFIX) or len(key) == len(KEY_PREFIX):
        raise Unauthorized(NO_KEY)
    principal = authenticate(session, key[len(KEY_PREFIX) :])
    principal.refuse_reporters()
    return principal


# --- what the SDK asks first ----------------------------------------------------------------------


def client_config() -> dict[str, Any]:
    """The SDK's feature flags: API keys (no token exchange), plain HTTP/1.1 through httpx,
    uncompressed protobuf bodies, futures polled one by one."""
    return {
        "pjwt_auth_enabled": False,
        "credential_default_source": "api_key",
        "use_pyqwest_transport": False,
        "proto_compress_fwdbwd": False,
        "parallel_fwdbwd_chunks": True,
        "sample_use_retrieve_futures": False,
        "custom_loss_server_side": False,
        "sample_join_sampling_session": False,
    }


def capabilities(ctx: AppContext) -> dict[str, Any]:
    return {
        "supported_models": [
            {
                "model_name": m.id,
                "max_context_length": m.context_length,
                "trainable": True,
                "sampleable": True,
            }
            for m in ctx.catalog
            if m.status == "available"
        ]
    }


# --- sessions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionState:
    """A session as the database holds it (`storage.models.TinkerSession`): its training
    clients' runs, oldest first, and its sampling clients."""

    id: str
    project: str
    created_at: datetime
    beat_at: datetime
    ended: str | None
    runs: tuple[str, ...] = ()
    samplers: tuple[str, ...] = ()

    @property
    def finished(self) -> bool:
        return self.ended is not None


CLOSED = "closed"
EXPIRED = "expired"


def _state(db: Session, row: SessionRow) -> SessionState:
    runs = db.scalars(
        select(TinkerClient.run_id)
        .where(TinkerClient.session_id == row.id)
        .order_by(TinkerClient.created_at, TinkerClient.run_id)
    )
    samplers = db.scalars(
        select(TinkerSampler.sampler_id)
        .where(TinkerSampler.session_id == row.id)
        .order_by(TinkerSampler.created_at, TinkerSampler.sampler_id)
    )
    return SessionState(
        row.id, row.project, row.created_at, row.beat_at, row.ended, tuple(runs), tuple(samplers)
    )


class Sessions:
    """The Tinker sessions. They live in the database, so that every service process (a
    replica, or this trainer after a restart) answers them; this process keeps only the time it
    began to (`since`: the time it was down does not count against a session's heartbeat) and
    the secret that signs its download URLs (`tinker_rest.external_weights_urls`)."""

    def __init__(self, since: datetime) -> None:
        self.since = since
        self.secret = secrets.token_bytes(32)

    def add(self, db: Session, principal: Principal, project: str, now: datetime) -> SessionState:
        row = SessionRow(
            id=new_id("s"),
            project=project,
            token_id=principal.token_id,
            created_at=now,
            beat_at=now,
        )
        db.add(row)
        db.flush()
        return _state(db, row)

    def get(self, db: Session, principal: Principal, session_id: str) -> SessionState:
        row = db.get(SessionRow, session_id) if session_id else None
        if row is None or not principal.can(row.project):
            raise NotFound(
                f"There is no Tinker session {session_id!r} on this trainer; create a new "
                "ServiceClient."
            )
        return _state(db, row)

    def beat(self, db: Session, session_id: str, now: datetime) -> None:
        db.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id, SessionRow.ended.is_(None))
            .values(beat_at=now)
        )

    def end(self, db: Session, session_id: str, how: str, now: datetime) -> bool:
        """Mark the session ended (`CLOSED`, `EXPIRED`) unless it has ended already: whether
        this call ended it, so that one process, once, gives its runs back."""
        ended = db.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id, SessionRow.ended.is_(None))
            .values(ended=how, ended_at=now)
        )
        return bool(getattr(ended, "rowcount", 0) == 1)

    def expired(self, database: Database, now: datetime, timeout: timedelta) -> list[SessionState]:
        """The sessions not ended whose latest heartbeat is older than `timeout`, each marked
        ended (`EXPIRED`) here, by one process once. None while this process has answered for
        less than `timeout`: a client that beat before a restart beats again within it."""
        cutoff = now - timeout
        if self.since > cutoff:
            return []
        with database.session() as db:
            stale = list(
                db.scalars(
                    select(SessionRow.id).where(
                        SessionRow.ended.is_(None), SessionRow.beat_at < cutoff
                    )
                )
            )
        gone = []
        for session_id in stale:
            with database.session() as db:
                if self.end(db, session_id, EXPIRED, now):
                    row = db.get(SessionRow, session_id)
                    assert row is not None
                    gone.append(_state(db, row))
        return gone

    def visible(self, db: Session, principal: Principal, limit: int, offset: int) -> list[str]:
        """The ids of the sessions of the projects `principal` may use, newest first."""
        query = select(SessionRow.id)
        if principal.projects is not None:
            query = query.where(SessionRow.project.in_(principal.projects))
        query = query.order_by(SessionRow.created_at.desc(), SessionRow.id)
        return list(db.scalars(query.limit(limit).offset(offset)))

    def run_of(self, db: Session, model_id: str) -> str:
        """The run of a model id: the run id itself, or a session's ``SESSION:train:SEQ``."""
        if ":train:" not in model_id:
            return model_id
        found = db.scalar(select(TinkerClient.run_id).where(TinkerClient.model_id == model_id))
        return found or model_id

    def add_client(
        self, db: Session, session_id: str, run_id: str, model_id: str | None, now: datetime
    ) -> None:
        db.add(
            TinkerClient(run_id=run_id, session_id=session_id, model_id=model_id, created_at=now)
        )

    def add_sampler(
        self, db: Session, session_id: str, sampler_id: str, run_id: str, now: datetime
    ) -> None:
        if db.get(TinkerSampler, (session_id, sampler_id)) is None:
            db.add(
                TinkerSampler(
                    session_id=session_id, sampler_id=sampler_id, run_id=run_id, created_at=now
                )
            )


def create_session(
    db: Session, ctx: AppContext, sessions: Sessions, principal: Principal, body: dict[str, Any]
) -> dict[str, Any]:
    project = body.get("project_id") or None
    if project is None:
        if principal.projects is None or len(principal.projects) != 1:
            raise InvalidRequest(
                "Say which project this session trains in: pass project_id= to ServiceClient "
                "or set TINKER_PROJECT_ID."
            )
        project = principal.projects[0]
    principal.require(str(project))
    made = sessions.add(db, principal, str(project), ctx.clock.now())
    return {"type": "create_session", "session_id": made.id}


def _ended_words(ctx: AppContext, found: SessionState) -> str:
    if found.ended == EXPIRED:
        seconds = int(ctx.settings.trainer.tinker.heartbeat_seconds)
        return f"Session {found.id} has ended: it sent no heartbeat for {seconds} s"
    return f"Session {found.id} has finished"


def _open(ctx: AppContext, found: SessionState) -> None:
    if found.finished:
        raise Conflict(f"{_ended_words(ctx, found)}; create a new ServiceClient.")


def heartbeat(ctx: AppContext, sessions: Sessions, principal: Principal, session_id: str) -> Answer:
    with ctx.db.session() as db:
        found = sessions.get(db, principal, session_id)
        if not found.finished:
            sessions.beat(db, found.id, ctx.clock.now())
            return Answer.of({"type": "session_heartbeat"})
    return Answer.of({"detail": f"{_ended_words(ctx, found)}."}, status=410)


def finish(ctx: AppContext, sessions: Sessions, principal: Principal, session_id: str) -> None:
    """End the session: each of its runs that is training saves its adapter and completes; one
    still waiting for its devices is cancelled."""
    with ctx.db.session() as db:
        found = sessions.get(db, principal, session_id)
        sessions.end(db, found.id, CLOSED, ctx.clock.now())
    _end_runs(ctx, found, principal)


def expire(ctx: AppContext, sessions: Sessions) -> list[str]:
    """End the sessions whose client stopped its heartbeat (`trainer.tinker.heartbeat-seconds`)
    as `finish` would; their ids."""
    timeout = timedelta(seconds=ctx.settings.trainer.tinker.heartbeat_seconds)
    gone = sessions.expired(ctx.db, ctx.clock.now(), timeout)
    for found in gone:
        for run_id in found.runs:
            with ctx.db.session() as db:
                event(
                    db,
                    run_id,
                    "session",
                    f"Tinker session {found.id} sent no heartbeat for {int(timeout.total_seconds())} s; "
                    "its run ends and gives its devices back",
                )
                db.commit()
        owner = Principal("tinker-session", found.id, "project", (found.project,))
        _end_runs(ctx, found, owner)
    return [found.id for found in gone]


def _end_runs(ctx: AppContext, found: SessionState, principal: Principal) -> None:
    for run_id in found.runs:
        with ctx.db.session() as db:
            run = db.get(Run, run_id)
            if run is None or Phase(run.phase) in TERMINAL:
                continue
            address = job_address(db, run) if run.phase == Phase.TRAINING else None
            if address is None:
                cancel(db, ctx, principal, run_id)
                continue
        try:
            route(address, "shutdown", b"{}", JSON)
        except ServiceUnavailable:
            # The job is gone already: the controller ends its run when it sees that.
            continue


class Expiry:
    """Ends expired sessions every few seconds, on a thread of its own, while the service
    runs."""

    def __init__(self, ctx: AppContext, sessions: Sessions) -> None:
        self._ctx = ctx
        self._sessions = sessions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tinker-expiry", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        interval = min(5.0, self._ctx.settings.trainer.tinker.heartbeat_seconds / 4)
        while not self._stop.wait(interval):
            try:
                expire(self._ctx, self._sessions)
            except Exception:  # the next pass tries again
                log.exception("ending expired Tinker sessions failed")

    def stop(self) -> None:
        self._stop.set()


# --- training clients -----------------------------------------------------------------------------


def _catalog_model(ctx: AppContext, name: str) -> CatalogModel:
    for model in ctx.catalog:
        if name in (model.id, model.hub_id) and model.status == "available":
            return model
    known = ", ".join(m.id for m in ctx.catalog if m.status == "available")
    raise InvalidRequest(f"There is no base model {name!r} here; use one of: {known}.")


def create_model(
    db: Session, ctx: AppContext, sessions: Sessions, principal: Principal, body: dict[str, Any]
) -> dict[str, Any]:
    found = sessions.get(db, principal, str(body.get("session_id", "")))
    _open(ctx, found)
    principal.require(found.project)
    model = _catalog_model(ctx, str(body.get("base_model", "")))
    lora = body.get("lora_config")
    if lora is None:
        raise InvalidRequest(
            "Only LoRA training clients are supported: use create_lora_training_client."
        )
    _adam_only(body)
    run = _create_run(
        db, ctx, sessions, found, model, InteractiveLora.model_validate(lora), None, body, None
    )
    return {"request_id": f"{run.id}:0", "model_id": run.id}


def _adam_only(body: dict[str, Any]) -> None:
    optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
    if optimizer != "adamw":
        raise InvalidRequest(f"The optimizer {optimizer!r} is not supported here; use Adam.")


def create_from_state(
    db: Session, ctx: AppContext, sessions: Sessions, principal: Principal, body: dict[str, Any]
) -> dict[str, Any]:
    """A training client that starts from saved weights (`create_training_client_from_state`
    and its ``_with_optimizer`` twin): a new run, of the saved run's base model and adapter,
    whose job loads the weights before its first request."""
    found = sessions.get(db, principal, str(body.get("session_id", "")))
    _open(ctx, found)
    principal.require(found.project)
    model_id = f"{found.id}:train:{int(body.get('model_seq_id') or 0)}"
    made = sessions.run_of(db, model_id)
    if made != model_id:
        # Asked again (the SDK retries a request whose answer it lost): the same client.
        return {"request_id": f"{made}:0", "model_id": model_id}
    path = str(body.get("path", ""))
    source_run = _check_readable(db, principal, path)
    source = InteractiveSettings.model_validate(source_run.settings)
    if not body.get("optimizer"):
        _adam_only(body)
    run = _create_run(
        db,
        ctx,
        sessions,
        found,
        _catalog_model(ctx, source.base_model.id),
        source.lora,
        InteractiveSource(path=path, optimizer=bool(body.get("optimizer"))),
        body,
        model_id,
    )
    return {"request_id": f"{run.id}:0", "model_id": model_id}


def _create_run(
    db: Session,
    ctx: AppContext,
    sessions: Sessions,
    found: SessionState,
    model: CatalogModel,
    lora: InteractiveLora,
    source: InteractiveSource | None,
    body: dict[str, Any],
    model_id: str | None,
) -> Run:
    """The run of a new training client, with its claim on the pool, recorded as a client of
    the session (by `model_id` when the SDK names the client itself)."""
    settings = InteractiveSettings(
        project=found.project,
        base_model=model_pin(model),
        lora=lora,
        session=found.id,
        source=source,
        execution=Execution(pool=ctx.default_pool, gpus=1),
    )
    now = datetime.now(UTC)
    saved = WEIGHTS_PATH.match(source.path) if source else None
    run = Run(
        id=new_id(),
        project=found.project,
        method=INTERACTIVE_METHOD,
        engine=INTERACTIVE_ENGINE,
        base_model=model.id,
        dataset="",
        pool=ctx.default_pool,
        gpus=1,
        plan={"kind": "tinker", "session": found.id, "request": body},
        settings=settings.to_json(),
        source_run=saved.group(1) if saved else None,
        source_snapshot=saved.group(2) if saved else None,
        source_kind=("continue" if source.optimizer else "branch") if source else None,
        phase=Phase.QUEUED.value,
        phase_since=now,
        phase_seconds={},
        created_at=now,
    )
    db.add(run)
    db.flush()
    open_claim(db, run)
    event(
        db,
        run.id,
        "submitted",
        f"submitted {INTERACTIVE_METHOD} on {model.id} (session {found.id})",
    )
    sessions.add_client(db, found.id, run.id, model_id, now)
    db.commit()
    return run


def _run(db: Session, principal: Principal, run_id: str) -> Run:
    run = db.get(Run, run_id)
    if run is None or run.method != INTERACTIVE_METHOD:
        raise NotFound(f"There is no training client {run_id!r} on this trainer.")
    if not principal.can(run.project):
        raise Forbidden(
            f"This key has no access to project {run.project!r}; use a key of that project."
        )
    return run


def get_info(
    db: Session, ctx: AppContext, sessions: Sessions, principal: Principal, model_id: str
) -> dict[str, Any]:
    """The model's names; its tokenizer is named by the catalog's Hugging Face name where the
    catalog gives one (so the SDK's ``get_tokenizer`` finds it on the Hub or in a local Hub
    cache), else by its catalog id."""
    run = _run(db, principal, sessions.run_of(db, model_id))
    settings = InteractiveSettings.model_validate(run.settings)
    hub = next((m.hub_id for m in ctx.catalog if m.id == settings.base_model.id), None)
    return {
        "type": "get_info",
        "model_id": model_id,
        "model_data": {
            "arch": settings.base_model.id,
            "model_name": settings.base_model.id,
            "tokenizer_id": hub or settings.base_model.id,
        },
        "is_lora": True,
        "lora_rank": settings.lora.rank,
        "model_name": settings.base_model.id,
    }


# --- work and futures -----------------------------------------------------------------------------


def _proto_model_and_seq(body: bytes) -> tuple[str, int]:
    """Fields 1 (``model_id``) and 2 (``seq_id``) of a ``ForwardBackwardRequest``, read off the
    protobuf wire format without its schema (which only the job loads)."""
    model_id, seq_id, at = "", 0, 0

    def varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            if at >= len(body):
                raise InvalidRequest("The forward_backward body is not a protobuf message.")
            byte = body[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(body):
        tag = varint()
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value = varint()
            if number == 2:
                seq_id = value
        elif wire == 2:
            length = varint()
            if number == 1:
                model_id = body[at : at + length].decode()
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise InvalidRequest("The forward_backward body is not a protobuf message.")
    return model_id, seq_id


def submit(
    ctx: AppContext,
    sessions: Sessions,
    principal: Principal,
    kind: str,
    body: bytes,
    content_type: str,
) -> Answer:
    """Queue work on a run's job: its answer is the future's request id."""
    headers: dict[str, str] = {}
    if kind == "forward_backward":
        if PROTOBUF not in content_type:
            raise InvalidRequest("forward_backward takes the SDK's protobuf body.")
        model_id, seq_id = _proto_model_and_seq(body)
        headers["X-Seq-Id"] = str(seq_id)
    else:
        fields = json.loads(body or b"{}")
        model_id = str(fields.get("model_id") or "")
        if kind == "load_weights" and not model_id:
            with ctx.db.session() as db:
                return Answer.of(create_from_state(db, ctx, sessions, principal, fields))
    with ctx.db.session() as db:
        run = _run(db, principal, sessions.run_of(db, model_id))
        if kind == "load_weights":
            _check_readable(db, principal, str(json.loads(body).get("path", "")))
        address = live_address(db, run)
    answered = route(address, kind, body, content_type, headers)
    if answered.status_code != 200:
        return Answer(answered.status_code, JSON, answered.content)
    request_id = answered.json()["request_id"]
    return Answer.of({"request_id": request_id, "model_id": model_id})


def _check_readable(db: Session, principal: Principal, path: str) -> Run:
    found = WEIGHTS_PATH.match(path)
    if found is None:
        raise InvalidRequest(
            f"{path!r} is not a path of saved weights (tinker://RUN/weights/NAME)."
        )
    run = _run(db, principal, found.group(1))
    if db.get(Snapshot, (run.id, found.group(2))) is None:
        raise NotFound(f"Run {run.id} has no saved weights {found.group(2)!r}.")
    return run


def retrieve(ctx: AppContext, principal: Principal, body: dict[str, Any]) -> Answer | JobAddress:
    """The answer to a ``retrieve_future`` known here (``create_model``'s, a run that ended), or
    the address of the job to ask: the router asks it without holding a thread, since the job
    holds the question until the result is there (`engines.tinker.api.HOLD_SECONDS`)."""
    request_id = str(body.get("request_id", ""))
    # ``RUN:SEQ`` for the run's queued work, ``RUN:sample:N`` for its samples.
    run_id, _, seq = request_id.partition(":")
    if not run_id or not (seq.isdigit() or seq.removeprefix("sample:").isdigit()):
        raise NotFound(f"There is no request {request_id!r}.")
    with ctx.db.session() as db:
        run = _run(db, principal, run_id)
        phase = Phase(run.phase)
        if seq == "0":
            return _creation(db, run, request_id)
        if phase in TERMINAL:
            return _ended(run)
        address = job_address(db, run)
    if address is None:
        raise NotFound(f"There is no request {request_id!r}.")
    return address


def _ended(run: Run) -> Answer:
    detail = f": {run.failure_detail}" if run.failure_detail else ""
    return Answer.of(
        {
            "error": f"Run {run.id} has ended ({run.phase.lower()}{detail}).",
            "category": "server" if run.phase == Phase.FAILED else "user",
        }
    )


def _creation(db: Session, run: Run, request_id: str) -> Answer:
    """``create_model``'s future: done once the run's job answers, failed if the run ended."""
    phase = Phase(run.phase)
    if phase in TERMINAL:
        return _ended(run)
    if phase == Phase.TRAINING and job_address(db, run) is not None:
        source = InteractiveSettings.model_validate(run.settings).source
        if source is not None:
            return Answer.of({"type": "load_weights", "path": source.path})
        return Answer.of({"type": "create_model", "model_id": run.id})
    state = "paused_capacity" if phase == Phase.QUEUED else "active"
    return Answer.of({"type": "try_again", "request_id": request_id, "queue_state": state})


# --- sampling -------------------------------------------------------------------------------------


def create_sampling_session(
    db: Session, ctx: AppContext, sessions: Sessions, principal: Principal, body: dict[str, Any]
) -> dict[str, Any]:
    """A sampling client: of sampler weights a run's job holds (``tinker://RUN/sampler_weights/
    NAME``), or of a base model, answered by a training client of that model in the session."""
    found = sessions.get(db, principal, str(body.get("session_id", "")))
    _open(ctx, found)
    path = body.get("model_path")
    if path:
        saved = SAMPLER_PATH.match(str(path))
        if saved is None:
            if WEIGHTS_PATH.match(str(path)):
                raise InvalidRequest(
                    f"{path!r} is a training snapshot (save_state); sample from the path "
                    "save_weights_for_sampler returns (tinker://RUN/sampler_weights/NAME)."
                )
            raise InvalidRequest(
                f"{path!r} is not a path of sampler weights (tinker://RUN/sampler_weights/NAME)."
            )
        run = _run(db, principal, saved.group(1))
        live_address(db, run)
        return _sampling_session(db, ctx, sessions, found, run.id, saved.group(2))
    name = str(body.get("base_model") or "")
    model = _catalog_model(ctx, name)
    for run_id in found.runs:
        held = db.get(Run, run_id)
        if (
            held is not None
            and held.base_model == model.id
            and held.phase == Phase.TRAINING.value
            and job_address(db, held) is not None
        ):
            return _sampling_session(db, ctx, sessions, found, held.id, BASE)
    raise Conflict(
        f"Sampling the base model {name!r} needs a training client of it in this session, "
        "whose job holds the model: create one with create_lora_training_client first."
    )


def _sampling_session(
    db: Session,
    ctx: AppContext,
    sessions: Sessions,
    found: SessionState,
    run_id: str,
    adapter: str,
) -> dict[str, Any]:
    sampler_id = _sampler_id(run_id, adapter)
    sessions.add_sampler(db, found.id, sampler_id, run_id, ctx.clock.now())
    return {"type": "create_sampling_session", "sampling_session_id": sampler_id}


def _sampler_id(run_id: str, adapter: str) -> str:
    return f"{run_id}{SAMPLER_MARK}{adapter}"


def _sampler_run(db: Session, principal: Principal, sampler_id: str) -> tuple[Run, str]:
    run_id, mark, adapter = sampler_id.partition(SAMPLER_MARK)
    if not mark or not adapter:
        raise NotFound(f"There is no sampling session {sampler_id!r}.")
    return _run(db, principal, run_id), adapter


def get_sampler(db: Session, principal: Principal, sampler_id: str) -> dict[str, Any]:
    run, adapter = _sampler_run(db, principal, sampler_id)
    settings = InteractiveSettings.model_validate(run.settings)
    path = None if adapter == BASE else f"tinker://{run.id}/sampler_weights/{adapter}"
    return {"sampler_id": sampler_id, "base_model": settings.base_model.id, "model_path": path}


def sample(ctx: AppContext, principal: Principal, body: bytes) -> Answer:
    """Start a sample on the job of the sampling session's run; the answer is its future."""
    fields = json.loads(body or b"{}")
    sampler_id = str(fields.get("sampling_session_id") or "")
    if not sampler_id:
        raise InvalidRequest(
            "A sample names its sampling session: create a sampling client with "
            "create_sampling_client or save_weights_and_get_sampling_client."
        )
    with ctx.db.session() as db:
        run, _ = _sampler_run(db, principal, sampler_id)
        address = live_address(db, run)
    answered = route(address, "sample", body, JSON)
    return Answer(answered.status_code, JSON, answered.content)
