"""Save-and-stop inside verl: `hooks` replaces verl's synchronous trainer when verl imports it,
and the replacement saves and ends training once the request file exists (in verl's
environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engines.verl.conftest import VerlEnv

# Runs verl's own environment (.venv-verl).
pytestmark = pytest.mark.slow

PROBE = """
import json, os, sys, verl
from types import SimpleNamespace
hooks_loaded = "akka_training.engines.verl.hooks" in sys.modules
trainer_loaded_early = "verl.trainer.ppo.v1.trainer_sync" in sys.modules
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
cls = get_trainer_cls("sync")

# One trainer at the end of step 3, without the GPU parts: the weight update verl runs at the
# end of a step and the checkpoint save are replaced by records of the calls.
calls = []
trainer = object.__new__(cls)
trainer.config = SimpleNamespace(trainer=SimpleNamespace(default_local_dir=sys.argv[1]))
trainer.global_steps, trainer.total_training_steps, trainer.timing_raw = 3, 10, {}
trainer.checkpoint_manager = SimpleNamespace(update_weights=lambda step: calls.append(("update", step)))
trainer._save_checkpoint = lambda: calls.append(("save", trainer.global_steps))
trainer.on_step_end()
before = (list(calls), trainer.total_training_steps)
open(os.environ["AKKA_VERL_SAVE_REQUEST"], "w").close()
trainer.on_step_end()
after = [list(calls), trainer.total_training_steps]
# a step verl saved on its schedule is not saved again
calls.clear()
trainer.global_steps, trainer.total_training_steps = 4, 10
os.makedirs(os.path.join(sys.argv[1], "global_step_4"))
trainer.on_step_end()
scheduled = [list(calls), trainer.total_training_steps]
print(json.dumps({"hooks_loaded": hooks_loaded, "trainer_loaded_early": trainer_loaded_early,
                  "subclass": issubclass(cls, PPOTrainerSync) and cls is not PPOTrainerSync,
                  "before": before, "after": after, "scheduled": scheduled,
                  "timed": "save_checkpoint" in trainer.timing_raw}))
"""


def test_trainer_saves_and_stops_on_request(verl_env: VerlEnv, tmp_path: Path) -> None:
    request = tmp_path / "save-request"
    done = verl_env.run(
        ["-c", PROBE, str(tmp_path / "checkpoints")],
        env={
            "VERL_USE_EXTERNAL_MODULES": "akka_training.engines.verl.hooks",
            "AKKA_VERL_SAVE_REQUEST": str(request),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    assert probe["hooks_loaded"] and not probe["trainer_loaded_early"]
    assert probe["subclass"]
    # without a request: verl's own end of step only
    assert probe["before"] == [[["update", 3]], 10]
    # with one: a checkpoint of step 3 at verl's save point, before the end of step wakes the
    # rollout engine to load the new weights; and step 3 becomes the last
    assert probe["after"] == [[["update", 3], ["save", 3], ["update", 3]], 3]
    assert probe["scheduled"] == [[["update", 4]], 4]
    assert probe["timed"]
