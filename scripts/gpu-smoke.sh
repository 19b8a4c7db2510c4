#!/usr/bin/env bash
# The first run of the TRL path on a GPU machine, prepared as one script: a TRL SFT run and a
# TRL GRPO run with vLLM colocate on a model the script builds (no hub), then the verl smoke.
#
#   scripts/gpu-smoke.sh [--dry-run] [WORKDIR]
#
# Sized for one H100 or H200 within $AKKA_SMOKE_SECONDS (default 480 s, 8 minutes), installs
# from a warm cache included:
#
#   1. the environment: $AKKA_VLLM_PYTHON when it imports vLLM and TRL; otherwise
#      scripts/setup-vllm-env.sh --gpu --system-site-packages builds .venv-vllm-gpu (vLLM 0.31,
#      TRL 1.16, PEFT, Liger; AKKA_VLLM_ENV_CACHE keeps it between machines' runs);
#   2. python -m akka_training.engines.trl.smoke: builds a Qwen3 of about 150M parameters on the
#      development tokenizer, trains SFT (the engine's fast path: padding-free with flash
#      attention where installed, bf16, checkpointing where memory asks) and GRPO (vLLM
#      colocate, sleep mode, the adapter synced each step) for a few steps each, and prints for
#      each: steps/s, tokens/s, MFU, the memory split, generation's share of the step, whether
#      the adapter loads in PEFT and in vLLM, PASS or FAIL per line;
#   3. scripts/gpu-smoke-verl.sh with the time that is left, when at least 240 s are.
#
# It exits 1 when any line failed, and always ends with the summary and where the logs are.
# --dry-run prints what each phase would run and checks that the scripts and the smoke module
# are there; it installs, builds and trains nothing (the project's tests run it on a CPU).
set -uo pipefail

smoke_name=gpu-smoke
smoke_title="GPU SMOKE SUMMARY"
smoke_help='2,24p'
# shellcheck source=scripts/smoke-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/smoke-lib.sh"
export PYTHONPATH="$repo_root/src${PYTHONPATH:+:$PYTHONPATH}"

# 1. the environment ------------------------------------------------------------------------
vllm_python="${AKKA_VLLM_PYTHON:-$repo_root/.venv-vllm-gpu/bin/python}"
probe="import vllm, trl, peft, torch; print('vllm', vllm.__version__, 'trl', trl.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if [[ $dry_run == 1 ]]; then
  if [[ -x scripts/setup-vllm-env.sh ]]; then
    would "build the environment (unless $vllm_python imports vLLM and TRL): scripts/setup-vllm-env.sh --gpu --system-site-packages $(dirname "$(dirname "$vllm_python")")"
  else
    fail "scripts/setup-vllm-env.sh is missing or not executable"
  fi
elif ! "$vllm_python" -c "import vllm, trl, peft" >/dev/null 2>&1; then
  phase_start=$(date +%s)
  target="$(dirname "$(dirname "$vllm_python")")"
  # what is left, less what the TRL runs need
  timeout $(( $(left) - 200 > 60 ? $(left) - 200 : 60 )) \
    scripts/setup-vllm-env.sh --gpu --system-site-packages "$target" >"$workdir/setup-vllm.log" 2>&1
  if "$vllm_python" -c "import vllm, trl, peft" >>"$workdir/setup-vllm.log" 2>&1; then
    pass "vLLM GPU environment installed in $(( $(date +%s) - phase_start )) s"
  else
    fail "vLLM GPU environment: vLLM or TRL missing after $(( $(date +%s) - phase_start )) s (see $workdir/setup-vllm.log)"
    finish
  fi
fi
if [[ $dry_run == 0 ]]; then
  versions=$("$vllm_python" -c "$probe" 2>&1 | tail -1)
  if [[ "$versions" == *"cuda True"* ]]; then pass "environment: $versions"; else fail "environment: $versions"; finish; fi
fi

# 2. TRL SFT and GRPO with vLLM -------------------------------------------------------------
smoke=(-m akka_training.engines.trl.smoke "$workdir/trl" --steps 4 --generation vllm)
if [[ $dry_run == 1 ]]; then
  if [[ -f src/akka_training/engines/trl/smoke.py ]]; then
    would "train and measure: $vllm_python ${smoke[*]}"
  else
    fail "src/akka_training/engines/trl/smoke.py is missing"
  fi
else
  seconds=$(( $(left) - 10 ))
  if (( seconds < 60 )); then
    fail "no time left for the TRL runs ($seconds s): set AKKA_SMOKE_SECONDS higher"
    finish
  fi
  timeout "$seconds" "$vllm_python" "${smoke[@]}" >"$workdir/trl.out" 2>"$workdir/trl.log"
  code=$?
  while IFS= read -r line; do
    case "$line" in
      PASS*|FAIL*) note "${line%% *}" "${line#* }" ;;
      *) [[ -n "$line" ]] && lines+=("$line") && echo "$line" ;;
    esac
  done <"$workdir/trl.out"
  if (( code == 124 )); then
    fail "the TRL runs ran past their $seconds s (see $workdir/trl.log)"
  elif (( code != 0 )); then
    status=1
    grep -q '^FAIL' "$workdir/trl.out" || fail "the TRL smoke exited $code (see $workdir/trl.log)"
  fi
fi

# 3. the verl smoke with what is left -------------------------------------------------------
if [[ $dry_run == 1 ]]; then
  if [[ -x scripts/gpu-smoke-verl.sh ]]; then
    would "then, with at least 240 s left: AKKA_SMOKE_SECONDS=<left> scripts/gpu-smoke-verl.sh $workdir/verl"
  else
    fail "scripts/gpu-smoke-verl.sh is missing or not executable"
  fi
elif (( $(left) >= 240 )); then
  AKKA_SMOKE_SECONDS=$(left) scripts/gpu-smoke-verl.sh "$workdir/verl" >"$workdir/verl.out" 2>&1
  code=$?
  while IFS= read -r line; do
    case "$line" in
      PASS*|FAIL*) note "${line%% *}" "verl: ${line#* }" ;;
    esac
  done < <(sed -n '/^SMOKE SUMMARY/,$p' "$workdir/verl.out" | sed 's/^  //')
  (( code == 0 )) || status=1
else
  note SKIP "verl smoke: $(left) s left, it needs 240 s (run scripts/gpu-smoke-verl.sh alone)"
fi
finish
