# Sourced by scripts/gpu-smoke.sh and scripts/gpu-smoke-serving.sh (not run on its own): their
# arguments ([--dry-run] [WORKDIR]), their working folder, their time budget and their
# PASS/FAIL lines. The sourcing script sets, before it sources this file with its arguments:
#   smoke_name     the working folder's prefix under /tmp, when no WORKDIR is given
#   smoke_title    the summary's title
#   smoke_help     the line range of the script's header that --help prints (sed's 'A,Bp')
# and gets: repo_root (the current directory), dry_run, workdir, budget ($AKKA_SMOKE_SECONDS,
# default 480), left, pass, fail, would, and finish (the summary; exits 1 if a line failed).
# shellcheck shell=bash

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root" || exit 2
dry_run=0
workdir=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) dry_run=1 ;;
    -h|--help) sed -n "${smoke_help:?}" "$0"; exit 0 ;;
    -*) echo "unknown option: $arg (see --help)" >&2; exit 2 ;;
    *) workdir="$arg" ;;
  esac
done
workdir="${workdir:-$(mktemp -d "/tmp/${smoke_name:?}.XXXXXX")}"
mkdir -p "$workdir"
workdir="$(cd "$workdir" && pwd)"
budget="${AKKA_SMOKE_SECONDS:-480}"
started=$(date +%s)
status=0
lines=()
left() { echo $(( budget - ($(date +%s) - started) )); }
note() { lines+=("$1 $2"); echo "$1 $2"; }
pass() { note PASS "$*"; }
fail() { note FAIL "$*"; status=1; }
would() { note WOULD "$*"; }
finish() {
  echo
  echo "${smoke_title:?} ($(( $(date +%s) - started )) s of $budget s$([[ $dry_run == 1 ]] && echo ', dry run'))"
  printf '  %s\n' "${lines[@]}"
  echo "  logs: $workdir"
  exit "$status"
}
