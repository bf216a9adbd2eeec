// quartet: the command dispatcher. It parses the command line; a job command gets the runtime
// (deck, placement, devices, model groups), a tool gets the command line alone. An error that
// escapes a job command on one rank aborts the whole job, so no rank is left waiting.
#include <cstdio>
#include <exception>
#include <string>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/commands/dpo_command.hpp"
#include "quartet/commands/export_command.hpp"
#include "quartet/commands/generate_command.hpp"
#include "quartet/commands/inspect_command.hpp"
#include "quartet/commands/launch_command.hpp"
#include "quartet/commands/plan_command.hpp"
#include "quartet/commands/rm_command.hpp"
#include "quartet/commands/selfcheck_command.hpp"
#include "quartet/commands/sft_command.hpp"
#include "quartet/commands/sweep_command.hpp"
#include "quartet/commands/tokenize_command.hpp"
#include "quartet/commands/train_command.hpp"
#include "quartet/core/cli.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/signals.hpp"
#include "quartet/dist/dist_config.hpp"
#include "quartet/dist/runtime.hpp"
#include "quartet/dist/startup_deadline.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace {

struct Command {
  quartet::CommandSpec spec;
  int (*job)(quartet::Runtime&, const quartet::CommandLine&) = nullptr;  // runs under MPI
  int (*tool)(const quartet::CommandLine&) = nullptr;                   // runs alone
};

const Command kCommands[] = {
    {{"selfcheck", "check every collective of every model group against a serial reference, "
                   "and the exchanges between groups"},
     [](quartet::Runtime& rt, const quartet::CommandLine&) { return quartet::run_selfcheck(rt); }},
    {{"train", "RLHF training: PPO, GRPO, RLOO or REINFORCE++ over the model groups of the deck; "
               "checkpoints, resumes by itself, and stops cleanly on SIGUSR1/SIGTERM (exit 75: resubmit)",
      "DECK",
      {{"time-limit", "DURATION", "wall-clock budget (as run.time_limit: 3600, 90m, 23h30m): checkpoint and "
                                  "exit 75 before it runs out"}}},
     quartet::run_train},
    {{"sft", "supervised fine-tuning of the actor on the [sft] demonstrations (prompt/response pairs or chat "
             "messages; loss on the responses), sharded over every rank; held-out loss, token accuracy and exact "
             "match; checkpoints, resumes by itself, and stops cleanly on SIGUSR1/SIGTERM (exit 75: resubmit)",
      "DECK",
      {{"time-limit", "DURATION", "wall-clock budget (as run.time_limit): checkpoint and exit 75 before it runs out"}}},
     quartet::run_sft_command},
    {{"dpo", "Direct Preference Optimisation of the actor on the [dpo] preference pairs against a frozen reference "
             "(sigmoid, cDPO or IPO loss), the reference on ranks of its own or colocated; held-out loss and reward "
             "accuracy; checkpoints, resumes by itself, and stops cleanly on SIGUSR1/SIGTERM (exit 75: resubmit)",
      "DECK",
      {{"time-limit", "DURATION", "wall-clock budget (as run.time_limit): checkpoint and exit 75 before it runs out"}}},
     quartet::run_dpo_command},
    {{"rm", "reward-model training on the [rm] preference pairs (Bradley-Terry loss), the reward model sharded over "
            "every rank; held-out pairwise accuracy, loss and mean rewards; checkpoints, resumes by itself, and stops "
            "cleanly on SIGUSR1/SIGTERM (exit 75: resubmit)",
      "DECK",
      {{"time-limit", "DURATION", "wall-clock budget (as run.time_limit): checkpoint and exit 75 before it runs out"}}},
     quartet::run_rm_command},
    {{"generate", "complete the prompts of [rollout] with the actor model of [model.actor]",
      "DECK",
      {{"logits", "OUT.h5", "also write the logits of a plain forward pass over the prompts"}}},
     quartet::run_generate},
    {{"tokenize", "encode standard input with a model's tokenizer (one line of ids per line); MODEL is a "
                  "directory, hf:ORG/NAME[@REVISION] in the default hub cache, or random: (the built-in "
                  "character tokenizer of random models)",
      "MODEL",
      {{"decode", nullptr, "read token ids, print text"},
       {"no-special", nullptr, "no special tokens added (encode) or printed (decode)"},
       {"write-files", "DIR", "with random:, write the built-in tokenizer as Hugging Face files into DIR "
                              "(for inputs/prepare/prepare_prompts.py --model DIR)"}}},
     nullptr, quartet::run_tokenize},
    {{"inspect", "summarise a run file (run.h5) or a checkpoint (a step_<N> directory, or the "
                 "checkpoints/ or run directory holding them): what it holds and whether it is intact",
      "PATH"},
     nullptr, quartet::run_inspect},
    {{"export", "write a checkpoint's actor, critic or reward model as a Hugging Face model directory "
                "(config.json, sharded safetensors, tokenizer)",
      "CHECKPOINT",
      {{"role", "ROLE", "actor, critic or reward (default: the checkpoint's one model, else actor)"},
       {"out", "DIR", "the directory to write (required)"},
       {"dtype", "DTYPE", "float32 | bfloat16 | float16 (default: the model's own)"},
       {"shard-size", "BYTES", "largest safetensors shard, e.g. 5GB (default 5GB, as transformers)"}}},
     nullptr, quartet::run_export},
    {{"sweep", "expand a sweep file (cartesian product over deck keys) into one deck per run "
               "and the list a Slurm job array reads",
      "SWEEP",
      {{"out", "DIR", "where the decks and the list go (default: the sweep file's `out`)"}}},
     nullptr, quartet::run_sweep},
    {{"launch", "run mpirun or srun so that SIGTERM, SIGINT or SIGHUP to it is a clean stop (checkpoint, "
                "exit 75; a second: exit 76), not a kill: quartet launch mpirun -np 8 quartet train DECK",
      "LAUNCHER [ARGS...]", {}, /*passthrough=*/true},
     nullptr, quartet::run_launch},
    {{"plan", "the memory plan: bytes per role and rank against the device memory (no MPI, no GPU)",
      "DECK",
      {{"ranks", "N", "ranks of the job (default: the sum of the placement's counts; colocated decks need it)"},
       {"ranks-per-node", "N", "ranks sharing a host, for the memory of CPU-only hosts (default: all)"},
       {"ranks-needed", nullptr, "print only the number of ranks the placement needs (no plan)"}}},
     nullptr, quartet::run_plan},
};

// The commands that stop cleanly on SIGUSR1/SIGTERM (core/signals.hpp); the others keep the
// signals' default action.
bool stops_cleanly(const std::string& command) {
  return command == "train" || command == "sft" || command == "dpo" || command == "rm";
}

// A stop request can come before main: the dynamic loader spends about half a second in
// LibTorch's static initialisers, and SIGUSR1's default action ends the process (exit 138, which
// slurm/train.sbatch takes for a crash). The executable's .preinit_array runs before any shared
// library's initialiser, so the flag-only handlers are there from the first instant (for
// `launch`, the signals it takes are blocked until it takes them).
void install_stop_handlers_first(int argc, char** argv, char**) {
  if (argc > 1 && stops_cleanly(argv[1])) quartet::install_stop_handlers();
  if (argc > 1 && std::string(argv[1]) == "launch") quartet::block_launch_signals();
}
__attribute__((section(".preinit_array"), used)) void (*const kPreinit)(int, char**, char**) = install_stop_handlers_first;

// dist.startup_timeout, read by this rank alone before MPI starts; the deck's real reading, with
// its errors, comes after, so an unreadable deck here only means the default.
double startup_timeout(const quartet::CommandLine& cl) {
  try {
    return quartet::deck_sections()
        .load(cl.operand, quartet::read_deck_file(cl.operand), cl.overrides)
        .get<quartet::DistConfig>()
        .startup_timeout;
  } catch (const std::exception&) {
    return quartet::DistConfig{}.startup_timeout;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<quartet::CommandSpec> specs;
  for (const auto& c : kCommands) specs.push_back(c.spec);

  quartet::CommandLine cl;
  try {
    cl = quartet::parse_command_line(argc, argv, specs);
  } catch (const quartet::UsageError& e) {
    std::fprintf(stderr, "quartet: %s\n", e.what());
    return 2;
  }
  if (cl.version) {
    std::printf("quartet %s\n", QUARTET_VERSION);
    return 0;
  }
  const Command* command = nullptr;
  for (const auto& c : kCommands)
    if (cl.command == c.spec.name) command = &c;
  if (cl.help) {
    std::printf("%s", command ? quartet::command_help(command->spec, quartet::deck_schema()).c_str()
                              : quartet::top_level_help(specs).c_str());
    return 0;
  }

  if (command->tool) {
    try {
      return command->tool(cl);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "quartet %s: error: %s\n", cl.command.c_str(), e.what());
      return 1;
    }
  }

  // Options that stand for deck keys join the overrides (the deck records where they came from).
  if (cl.has("time-limit")) cl.overrides.push_back("run.time_limit=" + cl.options.at("time-limit"));
  // The stop handlers are in place since .preinit_array; again now, as MPI's runtime may have
  // taken the signals over while it started.
  quartet::StartupDeadline deadline(startup_timeout(cl));
  quartet::World world(&argc, &argv);
  deadline.met();
  if (stops_cleanly(cl.command)) quartet::install_stop_handlers();
  int status = 2;
  try {
    auto runtime = quartet::start_runtime(world, cl.operand, cl.overrides, quartet::deck_sections());
    if (runtime) {
      status = command->job(*runtime, cl);
      // MPI_Finalize waits for every rank, unwatched: a rank that stalls near the end is caught here.
      quartet::watched::barrier(world.comm(), "the end of " + cl.command);
    }
  } catch (const std::exception& e) {
    quartet::eprintf_rank("quartet %s: fatal: %s\n", cl.command.c_str(), e.what());
    world.abort(1);
  }
  return status;
}
