#!/usr/bin/env bash
# make run: quartet COMMAND on DECK under mpirun, on the ranks the deck's placement needs.
#   cmake/run.sh COMMAND DECK [quartet arguments...]
# From the Makefile: BUILD; NP (empty: `quartet plan DECK --ranks-needed`, with the --set
# overrides among the arguments; 4 where the deck fixes no number, a colocated one without
# counts); RESUME (non-empty: the demo continues from its checkpoint instead of starting afresh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."   # the repository root: BUILD and DECK are relative to it
: "${BUILD:?}"
[ $# -ge 2 ] || { echo "usage: cmake/run.sh COMMAND DECK [quartet arguments...]" >&2; exit 2; }
command=$1 deck=$2
shift 2
quartet=$BUILD/quartet

# Open MPI refuses to run as root unless told; one OpenMP thread per rank on a small machine.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# More ranks than cores: a rank waiting in MPI yields its core instead of spinning on it.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMP_NUM_THREADS=1

# The ranks the deck needs, as quartet reads it (the arguments' --set overrides included).
ranks_needed() {
  local overrides=() out
  while [ $# -gt 0 ]; do
    case $1 in
      --set=*) overrides+=("$1") ;;
      --set) if [ $# -ge 2 ]; then overrides+=(--set "$2"); shift; fi ;;
    esac
    shift
  done
  if out=$("$quartet" plan "$deck" --ranks-needed "${overrides[@]}" 2>&1); then
    printf '%s' "$out"
  else
    printf '%s\n' "$out" >&2
    echo "run: NP=4, the default where the deck fixes no number of ranks (make run NP=N chooses)" >&2
    printf '4'
  fi
}
np=${NP:-}
[ -n "$np" ] || np=$(ranks_needed "$@")

if [ "$command $deck" = "train inputs/demo.deck" ] && [ -z "${RESUME:-}" ]; then
  echo "+ rm -rf runs/demo   # the demo starts afresh; make run RESUME=1 continues the last one"
  rm -rf runs/demo
fi
echo "+ mpirun -np $np --oversubscribe --bind-to none $quartet $command $deck${*:+ $*}"
exec mpirun -np "$np" --oversubscribe --bind-to none "$quartet" "$command" "$deck" "$@"
