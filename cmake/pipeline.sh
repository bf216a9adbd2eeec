#!/usr/bin/env bash
# make run: the whole RLHF pipeline on the CPU (docs/pipeline.md), on the sort-digits task:
#   0. data  demonstrations from a sloppy demonstrator and fresh RL prompts, drawn from seeds
#   1. sft   a tiny Llama from scratch on the demonstrations, then exported
#   2. rm    a reward model from the SFT model, on pairs the task's rule labelled, then exported
#   3. ppo   the SFT model against the learnt reward model
#   4. grpo  the SFT model against the rule itself
# Each stage prints its held-out exact match (stage 2: its held-out pairwise accuracy); the
# table at the end puts them side by side (postprocess/pipeline_summary.py).
# From the Makefile: BUILD, and the pinned Python in $BUILD/deps.env. Everything goes to
# runs/pipeline/, made afresh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."   # the repository root: BUILD and the decks are relative to it
: "${BUILD:?}"
quartet=$BUILD/quartet
quartet_python=""
# shellcheck source=/dev/null  # written by cmake/deps.sh: torch_args and quartet_python
source "$BUILD/deps.env"
python=${quartet_python:-python3}

# Open MPI refuses to run as root unless told; one OpenMP thread per rank on a small machine.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# More ranks than cores: a rank waiting in MPI yields its core instead of spinning on it.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMP_NUM_THREADS=1

out=runs/pipeline
started=$(date +%s)
say() { printf '\n== %s\n' "$*"; }
show() { echo "+ $*"; "$@"; }
ranks() { "$quartet" plan "$1" --ranks-needed; }
stage() {  # command deck
  show mpirun -np "$(ranks "$2")" --oversubscribe --bind-to none "$quartet" "$1" "$2"
}

echo "+ rm -rf $out   # the pipeline starts afresh"
rm -rf "$out"
mkdir -p "$out"

say "0/4 data: 4096 demonstrations (60% with the last two digits swapped), 2048 fresh RL prompts"
show "$python" inputs/prepare/make_sort_data.py --seed 11 --count 4096 --swap 0.6 --out "$out/demos.jsonl"
show "$python" inputs/prepare/make_sort_data.py --seed 12 --count 2048 --out "$out/rl_prompts.jsonl"

say "1/4 sft: demonstrations -> an imperfect policy"
stage sft inputs/pipeline/sft.deck
show "$quartet" export "$out/sft/checkpoints/latest" --out "$out/sft/hf"

say "2/4 rm: pairs labelled by the rule -> a reward model"
show "$python" inputs/prepare/make_sort_pairs.py --seed 1 --pairs-per-prompt 1 --prompts "$out/rl_prompts.jsonl" \
  --out "$out/pairs.jsonl"
show "$python" inputs/prepare/make_sort_pairs.py --seed 2 --prompts inputs/prompts/sort_digits_heldout.jsonl \
  --out "$out/pairs_heldout.jsonl"
stage rm inputs/pipeline/rm.deck
show "$quartet" export "$out/rm/checkpoints/latest" --out "$out/rm/hf"

say "3/4 ppo: the SFT policy against the learnt reward model"
stage train inputs/pipeline/ppo.deck

say "4/4 grpo: the SFT policy against the rule"
stage train inputs/pipeline/grpo.deck

say "held-out exact match after each stage ($(( $(date +%s) - started ))s in all)"
"$python" postprocess/pipeline_summary.py "$out"
