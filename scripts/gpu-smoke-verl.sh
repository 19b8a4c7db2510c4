#!/usr/bin/env bash
# The first run of the verl engine on a GPU machine, prepared as one script.
#
#   scripts/gpu-smoke-verl.sh [--dry-run] [WORKDIR]
#
# On one GPU (an H200 with torch, transformers and PEFT, without vLLM, is what it is sized for):
#
#   1. environments: the trainer's (.venv when it has what a job imports; otherwise one built
#      beside the machine's own torch, transformers and PEFT, .venv-smoke) and verl's GPU one
#      ($AKKA_VERL_PYTHON when it has vLLM; otherwise scripts/setup-verl-env.sh --gpu
#      --system-site-packages builds .venv-verl-gpu, which installs vLLM and verl's pins);
#   2. the model: $AKKA_SMOKE_MODEL, else a small real chat model found in the Hugging Face cache
#      (Qwen2.5-0.5B-Instruct, Qwen3-0.6B, SmolLM2-360M-Instruct), else the project's tiny
#      development model;
#   3. python -m akka_training.engines.verl.smoke: a grpo run of a few steps through the real
#      engine, paused with --checkpoint save, resumed from the node's checkpoint, cancelled; one
#      PASS/FAIL line per check, then a summary: memory (verl's actor/perf/max_memory_*),
#      MFU, tokens/s, the snapshot's size in the store, whether the adapter loads in PEFT.
#
# Everything runs within $AKKA_SMOKE_SECONDS (default 570 s, under 10 minutes): each phase gets
# what is left, the training acts at least 240 s. It exits 1 when any check failed or a phase
# could not run, and always ends with the summary and where the logs are.
#
# --dry-run (a machine without a GPU, and the project's tests): the same phases with the
# stand-in for verl the tests use (tests/engines/verl/fixtures/fake_verl.py) and its tokenizer
# as the model; nothing is installed.
#
# Installing needs the package index, or wheels in $AKKA_WHEELHOUSE (both environments). The
# GPU environment's download is the long part: torch 2.11 and vLLM 0.24, unless the machine's
# torch already fits verl's pins.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
dry_run=0
workdir=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    -*) echo "unknown option: $arg (see --help)" >&2; exit 2 ;;
    *) workdir="$arg" ;;
  esac
done
workdir="${workdir:-$(mktemp -d /tmp/verl-smoke.XXXXXX)}"
mkdir -p "$workdir"
workdir="$(cd "$workdir" && pwd)"
budget="${AKKA_SMOKE_SECONDS:-570}"
started=$(date +%s)
status=0
lines=()
left() { echo $(( budget - ($(date +%s) - started) )); }
note() { lines+=("$1 $2"); echo "$1 $2"; }
pass() { note PASS "$*"; }
fail() { note FAIL "$*"; status=1; }
finish() {
  echo
  echo "SMOKE SUMMARY ($(( $(date +%s) - started )) s of $budget s$([[ $dry_run == 1 ]] && echo ', dry run'))"
  printf '  %s\n' "${lines[@]}"
  echo "  logs: $workdir (verl: $workdir/run/jobs/smoke-1gpu/verl/logs/)"
  exit "$status"
}
pip_from=()
if [[ -n "${AKKA_WHEELHOUSE:-}" ]]; then
  pip_from=(--no-index --find-links "$AKKA_WHEELHOUSE")
  export AKKA_VERL_WHEELHOUSE="$AKKA_WHEELHOUSE"
fi

# 1. environments ---------------------------------------------------------------------------
smoke_imports="import akka_training.engines.verl.smoke, akka_training.devmodels"
trainer_python=""
export PYTHONPATH="$repo_root/src${PYTHONPATH:+:$PYTHONPATH}"
for candidate in .venv/bin/python .venv-smoke/bin/python python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$smoke_imports" >/dev/null 2>&1; then
    trainer_python="$candidate"
    break
  fi
done
if [[ -z "$trainer_python" && $dry_run == 0 ]]; then
  # Beside the machine's own torch, transformers and PEFT: only what a job imports besides.
  phase_start=$(date +%s)
  python3 -m venv --system-site-packages .venv-smoke >"$workdir/setup-trainer.log" 2>&1
  timeout $(( $(left) / 4 )) .venv-smoke/bin/python -m pip install --quiet --disable-pip-version-check \
    "${pip_from[@]}" httpx==0.28.1 pydantic==2.14.4 typer==0.29.2 rich==15.0.0 pyyaml==6.0.4 \
    pyarrow==26.0.1 psutil==7.2.2 nvidia-ml-py==13.615.71 opentelemetry-api==1.45.2 \
    opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 safetensors \
    sympy==1.14.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.9.3 \
    >>"$workdir/setup-trainer.log" 2>&1
  if .venv-smoke/bin/python -c "$smoke_imports" >>"$workdir/setup-trainer.log" 2>&1; then
    trainer_python=.venv-smoke/bin/python
    pass "trainer environment built beside the machine's torch in $(( $(date +%s) - phase_start )) s"
  fi
fi
if [[ -z "$trainer_python" ]]; then
  fail "trainer environment: none imports the engine (see $workdir/setup-trainer.log; or run scripts/setup)"
  finish
fi
[[ "$trainer_python" == .venv-smoke/bin/python ]] || pass "trainer environment: $trainer_python"

if [[ $dry_run == 1 ]]; then
  verl_python="$workdir/fake-verl/python"
  mkdir -p "$(dirname "$verl_python")"
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$("$trainer_python" -c 'import sys; print(sys.executable)')" \
    "$repo_root/tests/engines/verl/fixtures/fake_verl.py" >"$verl_python"
  chmod +x "$verl_python"
  export FAKE_VERL_STEP_SECONDS="${FAKE_VERL_STEP_SECONDS:-1}"
  pass "verl: the tests' stand-in (dry run)"
else
  verl_python="${AKKA_VERL_PYTHON:-$repo_root/.venv-verl-gpu/bin/python}"
  if ! "$verl_python" -c "import vllm, verl" >/dev/null 2>&1; then
    phase_start=$(date +%s)
    target="$(dirname "$(dirname "$verl_python")")"
    # what is left, less the time the training acts need
    timeout $(( $(left) - 240 > 60 ? $(left) - 240 : 60 )) \
      scripts/setup-verl-env.sh --gpu --system-site-packages "$target" >"$workdir/setup-verl.log" 2>&1
    if "$verl_python" -c "import vllm, verl" >>"$workdir/setup-verl.log" 2>&1; then
      pass "verl GPU environment with vLLM installed in $(( $(date +%s) - phase_start )) s"
    else
      fail "verl GPU environment: vLLM or verl missing after $(( $(date +%s) - phase_start )) s (see $workdir/setup-verl.log)"
      finish
    fi
  fi
  versions=$("$verl_python" -c "import importlib.metadata as m, torch; print('verl', m.version('verl'), 'vllm', m.version('vllm'), 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())" 2>&1 | tail -1)
  if [[ "$versions" == *"cuda True"* ]]; then pass "verl environment: $versions"; else fail "verl environment: $versions"; finish; fi
fi
export AKKA_VERL_PYTHON="$verl_python"

# 2. the model ------------------------------------------------------------------------------
model="${AKKA_SMOKE_MODEL:-}"
if [[ -z "$model" && $dry_run == 1 ]]; then
  model="$repo_root/tests/engines/verl/fixtures/tokenizer"
fi
if [[ -z "$model" ]]; then
  hub="${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"
  for name in Qwen--Qwen2.5-0.5B-Instruct Qwen--Qwen3-0.6B HuggingFaceTB--SmolLM2-360M-Instruct; do
    found=$(ls -d "$hub/models--$name"/snapshots/*/ 2>/dev/null | head -1)
    if [[ -n "$found" && -f "$found/config.json" ]]; then model="${found%/}"; break; fi
  done
fi
if [[ -z "$model" ]]; then
  catalog=$(timeout 120 "$trainer_python" -m akka_training.devmodels build "$workdir/models" 2>"$workdir/devmodels.log")
  model=$(printf '%s' "$catalog" | "$trainer_python" -c "import json, sys; print(next(e['path'] for e in json.load(sys.stdin) if e.get('modality', 'text') == 'text'))" 2>/dev/null)
  [[ -n "$model" ]] && note INFO "no small real model in the Hugging Face cache: the development model"
fi
if [[ -n "$model" && -d "$model" ]]; then pass "model: $model"; else fail "model: none (see $workdir/devmodels.log)"; finish; fi

# 3. train, pause with a save, resume, cancel, check ----------------------------------------
seconds=$(( $(left) - 30 ))
if (( seconds < 120 )); then
  fail "no time left for the training acts ($seconds s): set AKKA_SMOKE_SECONDS higher"
  finish
fi
dry=()
[[ $dry_run == 1 ]] && dry=(--dry-run)
timeout $(( seconds + 25 )) "$trainer_python" -m akka_training.engines.verl.smoke \
  --verl-python "$verl_python" --model "$model" --workdir "$workdir/run" --seconds "$seconds" \
  "${dry[@]}" >"$workdir/smoke.out" 2>"$workdir/smoke.log"
code=$?
while IFS= read -r line; do
  case "$line" in
    PASS*|FAIL*) note "${line%% *}" "${line#* }" ;;
    SUMMARY) ;;
    *) [[ -n "$line" ]] && lines+=("$line") && echo "$line" ;;
  esac
done <"$workdir/smoke.out"
if (( code == 124 )); then
  fail "the training acts ran past their $seconds s (see $workdir/smoke.log)"
elif (( code != 0 )); then
  status=1
  grep -q '^FAIL' "$workdir/smoke.out" || fail "the smoke check exited $code (see $workdir/smoke.log)"
fi
finish
