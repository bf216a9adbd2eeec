#pragma once
// `quartet sweep SWEEP [--out DIR]`: a parameter sweep as decks. The sweep file names a base deck
// and lists values per deck key; every combination (cartesian product) becomes one deck,
// <out>/decks/run_<i>.deck (the base deck with those keys set, run.out = <out>/run_<i> and
// run.name = <base name>_<i> unless the sweep sets them), and <out>/decks.list holds their paths,
// one per line, line i for run i, for slurm/sweep.sbatch's job array (`--array=1-N`).
//
// The sweep file (INI-like, '#' starts a comment):
//     deck = inputs/demo.deck        # the base deck, relative to the current directory
//     out = runs/sweep-demo          # decks/, decks.list and the run directories go here
//     [values]                       # deck key = comma-separated values, one run per combination
//     model.actor.lr = 1e-3, 3e-3
//     algorithm.kl_coef = 0.01, 0.05
//     run.seed = 1, 2                # 2 x 2 x 2 = 8 runs; the first key varies slowest
// A value holding a comma (a list-valued key such as rollout.stop) is written in double quotes.
// `out` defaults to runs/<sweep file name without its extension>; --out DIR replaces it.
// i runs from 1, zero-padded to the digits of the count (run_01 ... run_12), so array task i is
// run i. Relative paths in the decks stay relative to the current directory, as in the base deck:
// run the sweep, and submit the array, from the directory the base deck is run from.
//
// Every generated deck is parsed and checked (load_config, as `train` would) before anything is
// written: unknown keys, empty value lists, repeated keys or values, bad values and more than
// 10000 runs are refused with a DeckError naming the sweep file's line. A run directory that
// already exists is only reused for the same deck (same resolved values): train resumes from
// the checkpoints there, which must belong to the same run.
#include <iosfwd>

#include "quartet/core/cli.hpp"

namespace quartet {

// Prints errors itself: exit status 0, 2 for a refused sweep file or deck, 1 for other errors.
int run_sweep(const CommandLine& command_line);
// The work of run_sweep, the summary to `out`; throws DeckError / UsageError / Error (for tests).
void sweep_to(const CommandLine& command_line, std::ostream& out);

}  // namespace quartet
