#!/usr/bin/env bash
# Serving on a GPU machine, prepared as one script: a trainer on this machine's GPUs trains a
# short SFT run of the development model, one endpoint serves two of its adapters (its snapshot
# step-2 and its final adapter), and streamed chat completions through the trainer's
# /openai/v1 are timed against the endpoint job's own server and against vLLM alone (vLLM's
# OpenAI server on the same base model and adapters).
#
#   scripts/gpu-smoke-serving.sh [--dry-run] [WORKDIR]
#
# Sized for one H100 or H200 within $AKKA_SMOKE_SECONDS (default 480 s, 8 minutes), installs
# from a warm cache included:
#
#   1. the environment: $AKKA_VLLM_PYTHON when it imports vLLM; otherwise
#      scripts/setup-vllm-env.sh --gpu --system-site-packages builds .venv-vllm-gpu
#      (AKKA_VLLM_ENV_CACHE keeps it between machines' runs);
#   2. bench/serving.py --gpu --adapters --vllm PYTHON --smoke, with the trainer's Python
#      ($AKKA_PYTHON, default .venv/bin/python): time to first token and output tokens/s, 1 and
#      32 concurrent streams, trainer / direct and trainer / vLLM alone, a PASS or FAIL line
#      for the endpoint, each adapter's answer and each goal (the trainer adds at most 5% and
#      10 ms).
#
# It exits 1 when any line failed, and always ends with the summary and where the logs are.
# --dry-run prints what each phase would run and checks that the scripts are there; it
# installs, starts and measures nothing (the project's tests run it on a CPU).
set -uo pipefail

smoke_name=gpu-smoke-serving
smoke_title="GPU SERVING SMOKE SUMMARY"
smoke_help='2,24p'
# shellcheck source=scripts/smoke-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/smoke-lib.sh"
export PYTHONPATH="$repo_root/src${PYTHONPATH:+:$PYTHONPATH}"
trainer_python="${AKKA_PYTHON:-$repo_root/.venv/bin/python}"

# 1. the environment ------------------------------------------------------------------------
vllm_python="${AKKA_VLLM_PYTHON:-$repo_root/.venv-vllm-gpu/bin/python}"
probe="import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())"
if [[ $dry_run == 1 ]]; then
  if [[ -x scripts/setup-vllm-env.sh ]]; then
    would "build the environment (unless $vllm_python imports vLLM): scripts/setup-vllm-env.sh --gpu --system-site-packages $(dirname "$(dirname "$vllm_python")")"
  else
    fail "scripts/setup-vllm-env.sh is missing or not executable"
  fi
elif ! "$vllm_python" -c "import vllm" >/dev/null 2>&1; then
  phase_start=$(date +%s)
  target="$(dirname "$(dirname "$vllm_python")")"
  # what is left, less what the measurement needs
  timeout $(( $(left) - 240 > 60 ? $(left) - 240 : 60 )) \
    scripts/setup-vllm-env.sh --gpu --system-site-packages "$target" >"$workdir/setup-vllm.log" 2>&1
  if "$vllm_python" -c "import vllm" >>"$workdir/setup-vllm.log" 2>&1; then
    pass "vLLM GPU environment installed in $(( $(date +%s) - phase_start )) s"
  else
    fail "vLLM GPU environment: vLLM missing after $(( $(date +%s) - phase_start )) s (see $workdir/setup-vllm.log)"
    finish
  fi
fi
if [[ $dry_run == 0 ]]; then
  versions=$("$vllm_python" -c "$probe" 2>&1 | tail -1)
  if [[ "$versions" == *"cuda True"* ]]; then pass "environment: $versions"; else fail "environment: $versions"; finish; fi
fi

# 2. one endpoint, two adapters, through the trainer against vLLM alone ----------------------
bench=(bench/serving.py --gpu --adapters --vllm "$vllm_python" --smoke --streams 32 --repeats 3)
if [[ $dry_run == 1 ]]; then
  if [[ -f bench/serving.py ]]; then
    would "train, serve and measure: $trainer_python ${bench[*]}"
  else
    fail "bench/serving.py is missing"
  fi
  finish
fi
seconds=$(( $(left) - 10 ))
if (( seconds < 120 )); then
  fail "no time left to measure ($seconds s): set AKKA_SMOKE_SECONDS higher"
  finish
fi
timeout "$seconds" "$trainer_python" "${bench[@]}" >"$workdir/serving.out" 2>"$workdir/serving.log"
code=$?
while IFS= read -r line; do
  case "$line" in
    PASS*|FAIL*) note "${line%% *}" "${line#* }" ;;
    *) [[ -n "$line" ]] && lines+=("$line") && echo "$line" ;;
  esac
done <"$workdir/serving.out"
if (( code == 124 )); then
  fail "the measurement ran past its $seconds s (see $workdir/serving.log)"
elif (( code != 0 )); then
  status=1
  grep -q '^FAIL' "$workdir/serving.out" || fail "bench/serving.py exited $code (see $workdir/serving.log)"
fi
finish
