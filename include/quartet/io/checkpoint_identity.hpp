#pragma once
// What a checkpoint of `quartet train` needs to be one step of one run (its layout is in
// engine/training_checkpoint.hpp): trainer.h5 and the model files are all in the manifest, and
// they agree with each other. trainer.h5 and every model file hold the manifest's iteration and
// one run id; each model file's optimizer step count is the one trainer.h5 recorded beside it.
// An actor.h5 copied in from another step or another run is refused by name.
#include <string>
#include <vector>

#include "quartet/io/checkpoint_dir.hpp"

namespace quartet {

// Needs for verify_checkpoint / find_latest_checkpoint: `reader` names who needs them in the
// messages ("resuming this run"), `model_files` the model files it will read ("actor.h5").
CheckpointNeeds train_checkpoint_needs(const std::string& reader, const std::vector<std::string>& model_files);

// The model files a manifest's description lists (info.models.<role>.file), for readers that
// have no deck (inspect, export).
std::vector<std::string> listed_model_files(const Manifest& manifest);

}  // namespace quartet
