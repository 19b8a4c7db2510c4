#!/usr/bin/env bash
# The verl engine on a GPU machine: real verl 0.9.1, real vLLM, the project's development model.
#
#   scripts/gpu-smoke-verl.sh [WORKDIR]
#
# For 1 GPU, and 2 GPUs when the machine has two or more, it trains a 2-step grpo run through
# the engine exactly as a job does (snapshot every step, so verl saves, the model merger exports
# the adapter and PEFT reloads it) and prints one PASS or FAIL line per check; it exits 1 when
# any check failed. About 2 to 3 minutes per GPU count on one H200 once the environments exist.
#
# It needs the trainer's environment (.venv, scripts/setup) for the engine and the model builder,
# and verl's GPU environment (scripts/setup-verl-env.sh --gpu, or AKKA_VERL_PYTHON). It builds
# either when missing, which needs the package registry and takes several minutes more.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
workdir="${1:-$(mktemp -d /tmp/verl-smoke.XXXXXX)}"
mkdir -p "$workdir"
status=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; status=1; }

# 1. environments ---------------------------------------------------------------------------
if [[ ! -x .venv/bin/python ]]; then
  ./scripts/setup >"$workdir/setup.log" 2>&1 || { fail "trainer environment (see $workdir/setup.log)"; exit 1; }
fi
verl_python="${AKKA_VERL_PYTHON:-$repo_root/.venv-verl/bin/python}"
if ! "$verl_python" -c "import vllm" >/dev/null 2>&1; then
  scripts/setup-verl-env.sh --gpu "$(dirname "$(dirname "$verl_python")")" >"$workdir/setup-verl.log" 2>&1 \
    || { fail "verl GPU environment (see $workdir/setup-verl.log)"; exit 1; }
fi
versions=$("$verl_python" -c "import importlib.metadata as m, torch; print('verl', m.version('verl'), 'vllm', m.version('vllm'), 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())" 2>&1 | tail -1)
if [[ "$versions" == *"cuda True"* ]]; then pass "verl environment: $versions"; else fail "verl environment: $versions"; exit 1; fi
gpus=$("$verl_python" -c "import torch; print(torch.cuda.device_count())")
counts="1"
if (( gpus >= 2 )); then counts="1,2"; else echo "SKIP 2 GPUs: this machine has $gpus"; fi

# 2. the development model ------------------------------------------------------------------
catalog=$(.venv/bin/python -m akka_training.devmodels build "$workdir/models" 2>"$workdir/devmodels.log")
model=$(printf '%s' "$catalog" | .venv/bin/python -c "import json, sys; print(next(e['path'] for e in json.load(sys.stdin) if e.get('modality', 'text') == 'text'))" 2>/dev/null)
if [[ -n "$model" && -d "$model" ]]; then pass "development model built at $model"; else fail "development model (see $workdir/devmodels.log)"; exit 1; fi

# 3. training, snapshots, merge, PEFT reload ------------------------------------------------
timeout 900 .venv/bin/python -m akka_training.engines.verl.smoke \
  --verl-python "$verl_python" --model "$model" --workdir "$workdir/runs" --gpus "$counts" --steps 2 \
  || status=1
echo "verl logs: $workdir/runs/*/run/logs/"
exit $status
