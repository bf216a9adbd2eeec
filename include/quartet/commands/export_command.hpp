#pragma once
// `quartet export CHECKPOINT --out DIR [--role actor|critic] [--dtype ...] [--shard-size ...]`:
// a trained model of a checkpoint as a Hugging Face directory that transformers loads:
// config.json (the model's architecture and dtype), model.safetensors or sharded
// model-0000i-of-0000n.safetensors with model.safetensors.index.json, and the tokenizer files.
// CHECKPOINT is a step_<N> directory, or a checkpoints/ or run directory (its `latest`). The
// checkpoint is verified first; a damaged one is refused, naming what is wrong. No MPI needed.
#include "quartet/core/cli.hpp"

namespace quartet {

int run_export(const CommandLine& command_line);

}  // namespace quartet
