#!/usr/bin/env bash
# Build the Python environment the verl engine runs in: verl 0.9.1 in its own virtualenv, apart
# from the trainer's (verl pins its own torch, transformers and vLLM).
#
#   scripts/setup-verl-env.sh [--gpu] [--system-site-packages] [DIR]
#                                               DIR defaults to .venv-verl in the repository root
#
# Without --gpu (CPU machines, CI): verl plus what `python -m verl.trainer.main_ppo --cfg job`
# needs to compose and validate a configuration. `import verl` imports torch (verl.protocol), so
# torch is needed even here: the CPU build ($AKKA_VERL_CPU_TORCH, default torch==2.13.0) is
# installed first so that verl's dependencies do not pull a CUDA build. Measured on a 2-core
# machine shared with other work: 226 s with an empty pip cache, 203 s with a warm one (the
# time goes to installing, not downloading), 387 s on a busier one; 11 s for a second run,
# which only checks the environment.
#
# With --gpu (a machine with NVIDIA GPUs): verl[vllm]==0.9.1, which pins torch 2.11.0, vLLM 0.24
# and transformers 5.9.0, plus TransferQueue (the V1 trainer's data plane).
# --system-site-packages lets the environment see the machine's own packages, so that pip keeps
# a torch, transformers or PEFT already installed there when it fits verl's pins instead of
# downloading its own.
#
# Between CI runs (or builds on one node), set AKKA_VERL_ENV_CACHE to a directory that is kept:
# the environment is built once there, under a name made of the mode, the pins and the Python
# version, and DIR becomes a link to it, so a later run with the same pins takes seconds (the
# pip cache alone saves little: see above). AKKA_VERL_WHEELHOUSE names a directory of wheels to
# install from instead of the package index (a machine without one).
#
# Both also install what the project's reward function needs inside verl's workers (the reward
# layer imports pydantic, httpx, pyyaml, sympy and math-verify; verl brings most of them
# already, and its omegaconf holds the ANTLR runtime at 4.9.3, the version the trainer's
# environment pins for math-verify's parser too). The project's own package is not installed:
# the training job puts it on PYTHONPATH.
#
# Idempotent: a stamp file records what was installed; a second run with the same mode checks
# that verl still imports and returns.
set -euo pipefail

mode=cpu
target=""
system_site=""
for arg in "$@"; do
  case "$arg" in
    --gpu) mode=gpu ;;
    --system-site-packages) system_site="--system-site-packages" ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    -*) echo "unknown option: $arg" >&2; exit 2 ;;
    *) target="$arg" ;;
  esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${target:-$repo_root/.venv-verl}"
python_bin="${AKKA_VERL_BASE_PYTHON:-python3.11}"
verl_version="0.9.1"
cpu_torch="${AKKA_VERL_CPU_TORCH:-torch==2.13.0}"
# verl's V1 trainer module imports TransferQueue, cachetools, FastAPI and uvicorn (from the
# `verl-core` extra); the CPU environment takes these alone, without the rest of that extra, so
# the tests can call the trainer's own dump code.
trainer_deps=(TransferQueue==0.1.11 cachetools fastapi uvicorn)
reward_deps=(pydantic httpx pyyaml sympy math-verify==0.9.0 latex2sympy2_extended==1.11.0
  antlr4-python3-runtime==4.9.3)

if [[ "$mode" == gpu ]]; then
  wanted="gpu verl[vllm]==$verl_version ${reward_deps[*]}"
else
  wanted="cpu $cpu_torch verl==$verl_version ${trainer_deps[*]} ${reward_deps[*]}"
fi
wanted="$wanted${system_site:+ system-site}"

if [[ -n "${AKKA_VERL_ENV_CACHE:-}" ]]; then
  # Build (or find) the environment in the cache and link DIR to it.
  key=$(printf '%s %s' "$wanted" "$("$python_bin" -c 'import sys; print(sys.version)')" \
    | sha256sum | cut -c1-16)
  cached="$AKKA_VERL_ENV_CACHE/verl-env-$mode-$key"
  mkdir -p "$AKKA_VERL_ENV_CACHE"
  if [[ -L "$target" || ! -e "$target" ]]; then
    ln -sfn "$cached" "$target"
  else
    echo "$target exists and is not a link: remove it to use AKKA_VERL_ENV_CACHE" >&2
    exit 2
  fi
  target="$cached"
fi
stamp="$target/.akka-verl-env"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] \
  && "$target/bin/python" -c "import verl" >/dev/null 2>&1; then
  echo "verl environment at $target is up to date ($mode)"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "$target/bin/python" ]]; then
  "$python_bin" -m venv $system_site "$target"
fi
pip=("$target/bin/python" -m pip install --quiet --disable-pip-version-check)
if [[ -n "${AKKA_VERL_WHEELHOUSE:-}" ]]; then
  pip+=(--no-index --find-links "$AKKA_VERL_WHEELHOUSE")
fi

if [[ "$mode" == gpu ]]; then
  "${pip[@]}" "verl[vllm]==$verl_version" "${reward_deps[@]}"
else
  "${pip[@]}" "$cpu_torch"
  "${pip[@]}" "verl==$verl_version" "${trainer_deps[@]}" "${reward_deps[@]}"
fi

"$target/bin/python" - <<'EOF'
import importlib.metadata as md
import verl.trainer.main_ppo  # noqa: F401  (the imports themselves are the check)
import verl.trainer.ppo.v1.trainer_base  # noqa: F401
print("verl", md.version("verl"), "torch", md.version("torch"), "transformers", md.version("transformers"))
EOF
echo "$wanted" >"$stamp"
echo "verl environment ready at $target ($mode) in $(( $(date +%s) - start )) s"
