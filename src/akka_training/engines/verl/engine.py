"""The verl engine: one attempt of a grpo or gspo run, from the resolved plan to its outcome.

    VerlEngine(verl_python=None, extra_overrides=()).run(job) -> Outcome

It implements the `Engine` protocol (`akka_training.engines.engine`): the job entry point calls
it after it sent ``started``, and sends the end report from what it returns or raises. It:

1. prepares verl's inputs under ``verl`` in the job directory (`paths.VerlPaths`): the dataset
   in verl's layout, the reward configuration, the adapter a warm start or branch begins from,
   the checkpoint a resume or continuation restores; checks the plan against verl's rules and
   verl's own validation (`preflight`), and reports ``training``;
2. runs ``python -m verl.trainer.main_ppo`` with verl's interpreter (``AKKA_VERL_PYTHON`` or
   `verl_python`) and follows it: each optimizer step becomes a ``steps`` report (verl's
   metrics under our names, plus the figures of its rollouts) and a ``rollouts`` step file;
   each checkpoint verl writes (every ``saveEvery`` steps and at the end) becomes a snapshot:
   its training state (LoRA weights, optimizer, data position) and its adapter, read out of the
   shards in verl's environment (`snapshots.export_adapter`); once both are stored, the export's
   scratch and the checkpoints before it are removed (verl's own rotation is off, so nothing
   vanishes under an export);
3. obeys the service's directive after every event: ``stop`` ends verl at once;
   ``save-and-stop`` has verl save at the end of the current step and exit (`hooks`);
4. ends verl's whole process tree on every way out (`VerlProcess.stop`); a SIGTERM to the job
   is a save-and-stop (unless the service answers ``stop``), and ends verl at once when verl
   has not saved and exited within `TERMINATE_SAVE_SECONDS`;
5. returns an `Outcome`: finished, with the last snapshot's weights (already in the store) as
   the final adapter, or stopped; or raises a `JobError` with the reason it recognised
   (verl's environment missing or unable to start: ``job-start-failed``; a dataset it cannot
   convert: ``data-error``; a source it cannot restore: ``source-unavailable``; reward terms
   that cannot run: ``reward-error``; device or host memory exhausted, read from verl's log:
   ``device-oom``/``host-oom``; a plan verl refuses, a traceback or a failed snapshot:
   ``training-error``; an exit without a traceback: ``job-crashed``).

Each reported step goes through the job's step pipeline (`engines.step_pipeline`), as a TRL
step does: the health monitors, the ``steps`` report, the telemetry (its figures, the reward
terms' timings, failures and judge tokens, the rollout histograms), its step file and
``rollouts`` report, the stall watchdog and its span, in that order; a stall of verl's sets the
stalled gauge. `extra_overrides` are verl overrides
appended after ours (a deployment's tuning, such as
``actor_rollout_ref.rollout.gpu_memory_utilization=0.4``); verl validates them with the rest.
verl's files stay in the run's directory on the node (`VerlPaths.for_job`, beside the attempts'
job directories), so a resume on the same node finds the checkpoint it resumes from and reuses
it when it matches the snapshot, without downloading it; processes an earlier attempt left
there are ended first (`launcher.reap_leftovers`). The job's bundle resolver turns a rule term's bundle reference into
its unpacked directory (the same one the TRL engine gets).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import akka_training
from akka_training.blobstore.base import BlobStore
from akka_training.core import blobkeys
from akka_training.core.exits import memory_exhausted
from akka_training.core.plans import Monitors
from akka_training.core.reports import (
    SnapshotReport,
    TrainingReport,
)
from akka_training.core.resolved import JobSpec
from akka_training.engines.bundles import BundleResolver
from akka_training.engines.context import JobContext, Outcome
from akka_training.engines.failures import (
    DataError,
    DeviceOutOfMemory,
    HostOutOfMemory,
    JobCrashed,
    JobError,
    JobStartFailed,
    RewardError,
    SourceUnavailable,
)
from akka_training.engines.reporter import HttpReporter
from akka_training.engines.step_files import StepFiles
from akka_training.engines.step_pipeline import (
    FinishedStep,
    StepPipeline,
    StepSpan,
    nothing_scored,
)
from akka_training.engines.verl import data, snapshots
from akka_training.engines.verl.hooks import SAVE_REQUEST_ENV
from akka_training.engines.verl.launcher import (
    Exited,
    Stalled,
    Steps,
    VerlProcess,
    main_ppo_command,
    reap_leftovers,
)
from akka_training.engines.verl.metrics import VerlStep
from akka_training.engines.verl.overrides import (
    FROZEN_TOWERS,
    build_overrides,
    file_logger_env,
    lora_alpha,
    plan_sizes,
    runtime_env_overrides,
    schedule_steps,
    verl_constraints,
)
from akka_training.engines.verl.paths import DirectoryBusy, VerlPaths, lock
from akka_training.engines.verl.records import setup_error
from akka_training.engines.verl.reward_config import CONFIG_ENV, bundle_refs, reward_config_for
from akka_training.engines.verl.rollouts import RolloutJoiner, StepRollouts
from akka_training.rewards.figures import step_figures as rollout_figures
from akka_training.rewards.health import HealthWatch, correctness_term, remote_terms, rollout_health
from akka_training.rewards.inputs import RewardSetupError
from akka_training.rewards.rollouts import Rollout
from akka_training.rewards.scorer import RewardScorer
from akka_training.rewards.scoring import ScoreStats
from akka_training.telemetry import catalog as names
from akka_training.telemetry.tracing import RecordedSpan

log = logging.getLogger(__name__)

PYTHON_ENV = "AKKA_VERL_PYTHON"
HOOKS_MODULE = "akka_training.engines.verl.hooks"
# How long a step's report waits for verl's rollout dump after its metrics line.
DUMP_WAIT_SECONDS = 60.0
PREFLIGHT_TIMEOUT = 300.0
# How long verl gets to end after the job itself was told to terminate (the local runner kills
# the job 20 s after its SIGTERM).
TERMINATE_GRACE = 10.0
# How long a SIGTERM from outside gives verl to save at the end of its step and exit before the
# job ends verl at once (then TERMINATE_GRACE): both fit the runner's 20 s stop grace.
TERMINATE_SAVE_SECONDS = 10.0


class VerlEngine:
    """GRPO and GSPO on verl, colocated on the GPUs of one node (see the module docstring)."""

    def __init__(
        self, verl_python: Path | None = None, extra_overrides: Sequence[str] = ()
    ) -> None:
        # None: the interpreter AKKA_VERL_PYTHON names (the deployment sets it for its jobs).
        self.verl_python = verl_python
        self.extra_overrides = tuple(extra_overrides)

    def run(self, job: JobContext) -> Outcome:
        """Train one attempt of a grpo/gspo run with verl."""
        spec = job.spec
        paths = VerlPaths.for_job(job.workdir, spec.attempt)
        python = _verl_python(self.verl_python)
        try:
            with lock(paths):
                ended = reap_leftovers(spec.run_id)
                if ended:
                    log.warning("ended %d process(es) an earlier attempt of this run left", ended)
                overrides, env, written, schedule = _setup(
                    spec, paths, job.store, python, job.bundles, list(self.extra_overrides)
                )
                data_fit = {"rows": written.rows, "rowsWithoutAnswer": written.without_answer}
                total_steps = plan_sizes(spec).total_steps
                job.reporter.training(TrainingReport(total_steps=total_steps, data_fit=data_fit))
                pipeline = _step_pipeline(job, total_steps)
                pipeline.begin()
                return _train(job, pipeline, paths, python, overrides, env, schedule)
        except DirectoryBusy as exc:
            raise JobStartFailed(str(exc)) from exc


# --- setup ------------------------------------------------------------------------------------


def _setup(
    spec: JobSpec,
    paths: VerlPaths,
    blobs: BlobStore,
    python: Path,
    bundle_resolver: BundleResolver | None,
    extra: list[str],
) -> tuple[list[str], dict[str, str], data.WrittenDataset, int]:
    problems = verl_constraints(spec)
    if problems:
        raise JobError("verl cannot run this plan:\n" + "\n".join(problems))
    paths.make_dirs()
    _link_package(paths)
    written = _write_datasets(spec, paths, blobs)
    _write_reward_config(spec, paths, bundle_resolver)
    restored = _restore_sources(spec, paths, blobs)
    schedule = schedule_steps(
        spec, snapshots.saved_schedule_steps(restored) if restored is not None else None
    )
    env = _verl_env(paths, python)
    overrides = (
        build_overrides(spec, paths, schedule=schedule) + _runtime_env_overrides(env) + extra
    )
    answer = _preflight(python, overrides, env)
    if answer.get("flashAttention"):
        attention = build_overrides(spec, paths, attention="flash_attention_2", schedule=schedule)
        overrides = attention + _runtime_env_overrides(env) + extra
    return overrides, env, written, schedule


def _verl_python(configured: Path | None) -> Path:
    python = configured or (Path(os.environ[PYTHON_ENV]) if os.environ.get(PYTHON_ENV) else None)
    if python is None or not python.exists():
        raise JobStartFailed(
            f"verl's Python environment was not found ({python or f'{PYTHON_ENV} is not set'}): "
            "build it with scripts/setup-verl-env.sh --gpu and set "
            f"{PYTHON_ENV} to its bin/python",
        )
    return python


def _link_package(paths: VerlPaths) -> None:
    """Expose our package, and nothing else of this environment, to verl's interpreter."""
    link = paths.pylib / "akka_training"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(akka_training.__file__).absolute().parent, target_is_directory=True)


def _write_datasets(spec: JobSpec, paths: VerlPaths, blobs: BlobStore) -> data.WrittenDataset:
    """Write the train (and eval) dataset in verl's layout; returns what was written for
    training."""
    settings = spec.settings
    pins = [(settings.dataset, paths.train_data, "train")]
    if settings.eval_dataset is not None:
        pins.append((settings.eval_dataset, paths.eval_data, "eval"))
    written = []
    for pin, dest, split in pins:
        source = dest.with_suffix(".jsonl")
        try:
            with blobs.open(pin.blob) as f, open(source, "wb") as out:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
            rows = data.read_jsonl(source)
            written.append(data.write_verl_dataset(rows, dest, data_source=pin.name, split=split))
        except (OSError, data.DatasetRowError) as exc:
            raise DataError(f"dataset {pin.ref}: {exc}") from exc
    return written[0]


def _write_reward_config(
    spec: JobSpec, paths: VerlPaths, bundle_resolver: BundleResolver | None
) -> None:
    refs = bundle_refs(spec)
    if refs and bundle_resolver is None:
        raise RewardError("rule terms need their bundles, and none were provided")
    try:
        bundles = {ref: bundle_resolver(ref) for ref in refs} if bundle_resolver else {}
        config = reward_config_for(
            spec,
            records=paths.reward_records,
            max_response_length=plan_sizes(spec).max_response_length,
            bundles=bundles,
        )
        # Build the terms here once, so a term that cannot run fails the job before verl starts.
        reward = spec.settings.config.reward
        assert reward is not None
        RewardScorer.from_reward(reward, bundle_resolver=lambda ref: bundles[ref]).close()
    except (RewardSetupError, ValueError, KeyError, OSError) as exc:
        raise RewardError(str(exc)) from exc
    config.write(paths.reward_config)


def _restore_sources(spec: JobSpec, paths: VerlPaths, blobs: BlobStore) -> Path | None:
    """Fetch the adapter a run starts from, or put back the checkpoint it resumes or
    continues from; returns that checkpoint (None when the run restores none)."""
    source, gpus = spec.settings.source, spec.settings.execution.gpus
    try:
        if source is not None and source.kind in ("warm-start", "branch"):
            snapshots.fetch_adapter(blobs, source.weights, paths.source_adapter)
        if spec.resume is not None:
            return snapshots.restore_training_state(
                blobs,
                spec.resume.training_state,
                paths.checkpoints,
                step=spec.resume.step,
                gpus=gpus,
            )
        if source is not None and source.kind == "continue" and source.training_state:
            return snapshots.restore_training_state(
                blobs, source.training_state, paths.checkpoints, step=source.step, gpus=gpus
            )
    except snapshots.GpuCountMismatch as exc:
        raise JobError(str(exc)) from exc
    except snapshots.SnapshotError as exc:
        raise SourceUnavailable(str(exc)) from exc
    except OSError as exc:
        raise SourceUnavailable(str(exc)) from exc
    return None


def _verl_env(paths: VerlPaths, python: Path) -> dict[str, str]:
    save_request = paths.root / "save-request"
    save_request.unlink(missing_ok=True)
    cache = paths.root / "cache"
    return {
        "PYTHONPATH": str(paths.pylib),
        "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **file_logger_env(paths),
        "VERL_USE_EXTERNAL_MODULES": HOOKS_MODULE,
        SAVE_REQUEST_ENV: str(save_request),
        CONFIG_ENV: str(paths.reward_config),
        # No model hub, no experiment trackers, no usage reports.
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(cache / "datasets"),
        "WANDB_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def _runtime_env_overrides(env: dict[str, str]) -> list[str]:
    """Our variables for every Ray actor, explicitly, not only through inheritance."""
    return runtime_env_overrides(
        {k: env[k] for k in ("VERL_USE_EXTERNAL_MODULES", SAVE_REQUEST_ENV, CONFIG_ENV)}
    )


def _preflight(python: Path, overrides: list[str], env: dict[str, str]) -> dict[str, object]:
    command = [str(python), "-m", "akka_training.engines.verl.preflight", *overrides]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PREFLIGHT_TIMEOUT,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired as exc:
        raise JobStartFailed("verl's configuration check did not finish") from exc
    lines = done.stdout.strip().splitlines()
    try:
        answer: dict[str, object] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as exc:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise JobStartFailed(
            f"verl's environment could not check the configuration:\n{tail}"
        ) from exc
    if not answer.get("ok"):
        raise JobError(f"verl refused the configuration: {answer.get('error')}")
    return answer


# --- training ---------------------------------------------------------------------------------


class _Progress:
    """What the training loop knows: steps seen and reported, the latest snapshot."""

    def __init__(self, spec: JobSpec, schedule: int) -> None:
        self.schedule = schedule  # the steps the learning-rate schedule spans
        start = spec.resume.step if spec.resume else 0
        source = spec.settings.source
        if spec.resume is None and source is not None and source.kind == "continue":
            start = source.step
        self.step = start  # the latest step verl completed
        self.reported_step = start  # the latest step reported to the service
        self.snapshot_step = start  # the latest step saved as a snapshot
        # A resume starts from its snapshot: paused at the last step, it has nothing left to
        # train, and finishes with that snapshot's weights.
        self.snapshot_weights: str | None = spec.resume.weights if spec.resume else None
        self.adapter_modules: list[str] = []
        # step -> (its metrics, when they came: monotonic, and time.time() for its span)
        self.pending: dict[int, tuple[VerlStep, float, float]] = {}
        self.stopping: str | None = None  # the directive being carried out
        # The judge and http terms, whose failures and latencies the health figures count.
        self.remote_terms = remote_terms(spec.settings.config.reward)


def _step_pipeline(job: JobContext, total_steps: int) -> StepPipeline:
    """What each reported step owes, as under TRL: the run's health monitors
    (`rewards.health`), and each step file stored and reported as the step is."""
    spec = job.spec
    config = spec.settings.config
    return StepPipeline.for_job(
        job,
        "rl",
        total_steps,
        monitors=HealthWatch(
            spec.run_id,
            config.monitors or Monitors(),
            correctness_term(config.monitors, config.reward),
        ),
        rollouts=StepFiles(job.store, job.reporter, spec.run_id),
    )


def _train(
    job: JobContext,
    pipeline: StepPipeline,
    paths: VerlPaths,
    python: Path,
    overrides: list[str],
    env: dict[str, str],
    schedule: int,
) -> Outcome:
    spec, blobs, reporter = job.spec, job.store, job.reporter
    sizes = plan_sizes(spec)
    reward = spec.settings.config.reward
    weights = {t.name: t.weight for t in reward.terms} if reward else {}
    joiner = RolloutJoiner(
        paths.rollouts, paths.reward_records, weights, sizes.prompts_per_step * sizes.generations
    )
    progress = _Progress(spec, schedule)
    process = VerlProcess(
        main_ppo_command(python, overrides),
        metrics_file=paths.metrics_file,
        log_file=paths.log_file,
        env=env,
        cwd=paths.root,
        family=f"{spec.run_id}/{spec.attempt}",
    )
    grace = 30.0
    with _terminate_saves(reporter):
        process.start()
        try:
            for event in process.events(stall_seconds=spec.telemetry.stall_seconds):
                # 1. take in what verl did
                if isinstance(event, Steps):
                    for step in event.steps:
                        progress.pending[step.step] = (step, time.monotonic(), time.time())
                        progress.step = max(progress.step, step.step)
                    pipeline.telemetry.stalled(False)
                elif isinstance(event, Stalled):
                    pipeline.telemetry.stalled(True)
                    log.warning(
                        "verl completed no step for %.0f s (last step %s)",
                        event.seconds,
                        event.last_step,
                    )
                final = isinstance(event, Exited)
                # 2. report steps and rollouts, in order
                _report_steps(spec, pipeline, joiner, progress, final=final)
                # 3. obey the service before a snapshot's export, which takes a while
                if not final:
                    _obey(reporter.action, process, env, progress)
                # 4. snapshots of the checkpoints whose steps were reported, in order
                _take_snapshot(spec, paths, blobs, reporter, python, env, progress)
                if isinstance(event, Exited):
                    outcome = _finish(spec, paths, progress, event.returncode, blobs)
                    if not outcome.stopped:
                        _tidy_finished(paths)
                    return outcome
                _obey(reporter.action, process, env, progress)
        except SystemExit:
            grace = TERMINATE_GRACE
            raise
        finally:
            # Every way out, a normal exit too: verl and every process it started (Ray leaves
            # processes in sessions of their own behind when verl ends).
            process.stop(grace=grace)
    raise AssertionError("verl's events ended without an exit")


@contextlib.contextmanager
def _terminate_saves(reporter: HttpReporter) -> Iterator[None]:
    """While verl runs, SIGTERM to the job (a node drain, a kill) is a save-and-stop unless the
    service answers ``stop`` (`HttpReporter.terminated`; a cancel or a pause): verl saves at the
    end of its step and exits, and the job reports the snapshot and ``stopped``. When verl has
    not ended `TERMINATE_SAVE_SECONDS` later (or on a second SIGTERM), the job unwinds through
    its ``finally`` blocks, which end verl's process tree, and exits with the signal: the run is
    retried from its last committed snapshot."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    told: list[float] = []

    def _exit(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    def _terminate(signum: int, frame: FrameType | None) -> None:
        if told:
            _exit(signum, frame)
        told.append(time.monotonic())
        log.warning(
            "SIGTERM: saving at the end of verl's step, ending verl in %.0f s otherwise",
            TERMINATE_SAVE_SECONDS,
        )
        reporter.terminated()
        signal.setitimer(signal.ITIMER_REAL, TERMINATE_SAVE_SECONDS)

    previous = signal.signal(signal.SIGTERM, _terminate)
    previous_alarm = signal.signal(signal.SIGALRM, _exit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGALRM, previous_alarm)


def step_span(step: int, figures: dict[str, float], ended: float) -> StepSpan | None:
    """A verl step's span, with its phases under it, from verl's timings: the step ends when
    its metrics line arrives; generation (verl scores rollouts while it generates) opens it
    and the policy update closes it. None when verl did not time the step."""
    seconds = figures.get("timing/step")
    if seconds is None:
        return None
    began = ended - seconds
    attrs = {names.STEP: step}
    phases: list[RecordedSpan] = []
    generation = figures.get("timing/generation")
    if generation is not None:
        phases.append(
            RecordedSpan(names.PREFIX + "rl.generation", began, began + generation, attrs)
        )
        reward = figures.get("timing/reward")
        if reward is not None:
            start = began + generation
            phases.append(RecordedSpan(names.PREFIX + "rl.reward", start, start + reward, attrs))
    update = figures.get("timing/update")
    if update is not None:
        phases.append(RecordedSpan(names.PREFIX + "rl.update", ended - update, ended, attrs))
    return StepSpan(began, ended, phases)


def _obey(action: str, process: VerlProcess, env: dict[str, str], progress: _Progress) -> None:
    if action == "stop" and progress.stopping != "stop":
        progress.stopping = "stop"
        process.stop()
    elif action == "save-and-stop" and progress.stopping is None:
        progress.stopping = "save-and-stop"
        # hooks.SaveOnRequestTrainer saves at the end of the current step and ends training.
        Path(env[SAVE_REQUEST_ENV]).touch()


def _report_steps(
    spec: JobSpec,
    pipeline: StepPipeline,
    joiner: RolloutJoiner,
    progress: _Progress,
    *,
    final: bool,
) -> None:
    """Hand pending steps to the step pipeline in order, each once its rollout dump is
    complete (or after `DUMP_WAIT_SECONDS`, or when verl has exited, without what is
    missing)."""
    rl = spec.settings.config.rl_hyperparams
    assert rl is not None
    for number in sorted(progress.pending):
        verl_step, seen, arrived = progress.pending[number]
        waited_out = final or time.monotonic() - seen > DUMP_WAIT_SECONDS
        step_rollouts = joiner.take(number, final=waited_out)
        if step_rollouts is None and not waited_out:
            return  # later steps wait for this one
        figures = verl_step.figures
        rollouts: list[Rollout] = []
        scoring = nothing_scored()
        if step_rollouts is not None and step_rollouts.rollouts:
            # verl's own figures win where both exist: its completion lengths count the tokens
            # it generated, ours re-tokenize the decoded text.
            figures = (
                rollout_figures(
                    step_rollouts.rollouts, rl.generations_per_prompt, rl.max_completion_tokens
                )
                | figures
            )
            if "timing/reward" not in figures and step_rollouts.reward_seconds is not None:
                figures["timing/reward"] = step_rollouts.reward_seconds
            if step_rollouts.unmatched:
                figures["rollouts/without_record"] = float(step_rollouts.unmatched)
            figures |= rollout_health(
                step_rollouts.rollouts, progress.remote_terms, _term_seconds(step_rollouts)
            )
            rollouts = step_rollouts.rollouts
            scoring = _scoring(step_rollouts)
        # A monitor's pause: as under TRL, the run pauses with a snapshot; verl saves at the
        # end of the step it is in (`_obey`), the first step after this one it has not finished.
        health, pause = pipeline.check(number, figures)
        pipeline.finish(
            FinishedStep(
                step=number,
                figures=figures | health,
                pause=pause,
                span=step_span(number, verl_step.figures, arrived),
                rollouts=rollouts,
                scoring=scoring,
            )
        )
        del progress.pending[number]
        progress.reported_step = number


def _term_seconds(rollouts: StepRollouts) -> dict[str, list[float]]:
    """Per term, the seconds it took on each of the step's rollouts (the reward records)."""
    seconds: dict[str, list[float]] = defaultdict(list)
    for record in rollouts.records:
        for term, taken in record.term_seconds.items():
            seconds[term].append(taken)
    return seconds


def _scoring(rollouts: StepRollouts) -> ScoreStats:
    """What scoring a step's rollouts cost, from the reward function's records."""
    failures: Counter[tuple[str, str]] = Counter()
    prompt_tokens: Counter[str] = Counter()
    completion_tokens: Counter[str] = Counter()
    retries: Counter[str] = Counter()
    for record in rollouts.records:
        failures.update(record.failures.items())
        prompt_tokens.update(record.judge_prompt_tokens)
        completion_tokens.update(record.judge_completion_tokens)
        retries.update(record.retries)
    return ScoreStats(
        seconds=_term_seconds(rollouts),
        failures=dict(failures),
        judge_prompt_tokens=dict(prompt_tokens),
        judge_completion_tokens=dict(completion_tokens),
        wall_seconds=rollouts.reward_seconds or 0.0,
        retries=dict(retries),
    )


def _take_snapshot(
    spec: JobSpec,
    paths: VerlPaths,
    blobs: BlobStore,
    reporter: HttpReporter,
    python: Path,
    env: dict[str, str],
    progress: _Progress,
) -> None:
    """Turn each checkpoint verl completed since the last snapshot into a snapshot, in order,
    once its step was reported (verl saves before it logs the step)."""
    for step in snapshots.new_checkpoints(paths.checkpoints, after=progress.snapshot_step):
        if step > progress.reported_step:
            return
        _snapshot(spec, paths, blobs, reporter, python, env, progress, step)


def _snapshot(
    spec: JobSpec,
    paths: VerlPaths,
    blobs: BlobStore,
    reporter: HttpReporter,
    python: Path,
    env: dict[str, str],
    progress: _Progress,
    step: int,
) -> None:
    keys = blobkeys.snapshot_keys(spec.run_id, step)
    checkpoint = paths.checkpoint(step)
    scratch = paths.exports / f"step-{step}"
    settings = spec.settings
    try:
        adapter = snapshots.export_adapter(
            python,
            checkpoint,
            scratch,
            alpha=lora_alpha(spec),
            base_model=settings.base_model.path,
            exclude_modules=FROZEN_TOWERS if settings.base_model.modality != "text" else None,
            env={**os.environ, **env},
            log_file=paths.log_file,
        )
        snapshots.save_adapter(blobs, keys.weights, adapter)
        adapter_bytes = snapshots.directory_bytes(adapter)
        modules = snapshots.adapter_modules(adapter)
        state_bytes = snapshots.save_training_state(
            blobs,
            keys.training_state,
            checkpoint,
            step=step,
            gpus=settings.execution.gpus,
            schedule_steps=progress.schedule,
        )
    except (snapshots.SnapshotError, OSError, subprocess.TimeoutExpired) as exc:
        raise JobError(f"the snapshot of step {step} could not be saved: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # Both parts are stored: the checkpoints before this one are no longer needed here.
    snapshots.rotate(paths.checkpoints, keep=step)
    progress.snapshot_step = step
    progress.snapshot_weights = keys.weights
    progress.adapter_modules = modules
    log.info(
        "snapshot of step %d stored: adapter %d bytes, training state %d bytes",
        step,
        adapter_bytes,
        state_bytes,
    )
    reporter.snapshot(
        SnapshotReport(
            name=keys.name,
            step=step,
            weights=keys.weights,
            training_state=keys.training_state,
            weights_bytes=adapter_bytes,
            training_state_bytes=state_bytes,
        )
    )


def _tidy_finished(paths: VerlPaths) -> None:
    """A finished run needs nothing of its verl directory on the node but verl's logs and
    metrics: its snapshots are in the store (a continuation downloads what it starts from)."""
    for directory in (
        paths.checkpoints,
        paths.exports,
        paths.root / "data",
        paths.root / "rollouts",
    ):
        shutil.rmtree(directory, ignore_errors=True)


def _finish(
    spec: JobSpec, paths: VerlPaths, progress: _Progress, returncode: int, blobs: BlobStore
) -> Outcome:
    if progress.stopping == "stop" or (progress.stopping == "save-and-stop" and returncode == 0):
        step = progress.snapshot_step if progress.stopping == "save-and-stop" else progress.step
        return Outcome(step=step, stopped=True, adapter_modules=progress.adapter_modules)
    if returncode != 0:
        raise _diagnose(paths, returncode)
    if progress.snapshot_weights is None or progress.snapshot_step < plan_sizes(spec).total_steps:
        raise JobError(
            f"verl ended at step {progress.step} without a final checkpoint "
            f"(the last snapshot is of step {progress.snapshot_step})"
        )
    modules = progress.adapter_modules
    if not modules:  # the weights are the resumed snapshot's: read their modules from the store
        adapter = paths.exports / "resumed"
        try:
            modules = snapshots.adapter_modules(
                snapshots.fetch_adapter(blobs, progress.snapshot_weights, adapter)
            )
        except (snapshots.SnapshotError, OSError) as exc:
            raise SourceUnavailable(f"the adapter of the resumed snapshot: {exc}") from exc
        finally:
            shutil.rmtree(adapter, ignore_errors=True)
    return Outcome(
        step=progress.snapshot_step,
        adapter_key=progress.snapshot_weights,
        adapter_modules=modules,
    )


def _diagnose(paths: VerlPaths, returncode: int) -> JobError:
    """Why verl exited with an error, from its log and the reward workers' notes."""
    message = setup_error(paths.reward_records)
    if message:
        return RewardError(message)
    text = (
        paths.log_file.read_text(encoding="utf-8", errors="replace")
        if paths.log_file.exists()
        else ""
    )
    tail = "\n".join(text.strip().splitlines()[-30:])
    memory = memory_exhausted(text)
    if memory == "device":
        return DeviceOutOfMemory(tail)
    if memory == "host" or returncode == -9:
        return HostOutOfMemory(tail)
    if "Traceback (most recent call last)" in text:
        return JobError(tail)
    return JobCrashed(f"verl exited with status {returncode}\n{tail}")
