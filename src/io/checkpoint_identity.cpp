#include "quartet/io/checkpoint_identity.hpp"

#include "quartet/io/sharded_h5.hpp"
#include "quartet/io/tensor_h5.hpp"

namespace quartet {

namespace {

int64_t scalar_of(const std::string& path, const std::string& name) {
  return read_tensor_h5(path, name).reshape({-1})[0].item<int64_t>();
}

std::string listed_run(const Manifest& m) {
  const auto& info = m.info;
  return info.is_object() && info.contains("run_id") && info["run_id"].is_string() ? info["run_id"].get<std::string>()
                                                                                   : "";
}

std::vector<std::string> one_step_of_one_run(const std::string& dir, const Manifest& m,
                                             const std::vector<std::string>& model_files) {
  std::vector<std::string> problems;
  const std::string trainer = dir + "/trainer.h5", step = std::to_string(m.iteration);
  const int64_t iteration = scalar_of(trainer, "iteration");
  const std::string run = read_attribute_h5(trainer, "run_id");
  if (iteration != m.iteration)
    problems.push_back("trainer.h5: holds iteration " + std::to_string(iteration) + ", the manifest step " + step);
  if (run != listed_run(m))
    problems.push_back("trainer.h5: belongs to run '" + run + "', the manifest to run '" + listed_run(m) + "'");
  for (const std::string& name : model_files) {
    ShardedH5Reader file(dir + "/" + name, MPI_COMM_NULL);
    const int64_t its = file.int_attribute("iteration");
    if (its != m.iteration)
      problems.push_back(name + ": holds iteration " + std::to_string(its) + " (a file of step_" + std::to_string(its) +
                         "?), the manifest step " + step);
    const std::string theirs = file.has_attribute("run_id") ? file.string_attribute("run_id") : "";
    if (theirs != run) problems.push_back(name + ": belongs to run '" + theirs + "', trainer.h5 to run '" + run + "'");
    // Checkpoints written before trainer.h5 recorded these have no count to compare with.
    const std::string role = name.substr(0, name.rfind('.'));
    const std::string steps = role + "_optimizer_steps";
    if (!has_tensor_h5(trainer, steps)) continue;
    const int64_t recorded = scalar_of(trainer, steps), own = file.int_attribute("optimizer_steps");
    if (own != recorded)
      problems.push_back(name + ": records " + std::to_string(own) + " optimizer steps, trainer.h5 " +
                         std::to_string(recorded));
  }
  return problems;
}

}  // namespace

CheckpointNeeds train_checkpoint_needs(const std::string& reader, const std::vector<std::string>& model_files) {
  CheckpointNeeds needs;
  needs.reader = reader;
  needs.files.push_back("trainer.h5");
  needs.files.insert(needs.files.end(), model_files.begin(), model_files.end());
  needs.consistent = [model_files](const std::string& dir, const Manifest& m) {
    return one_step_of_one_run(dir, m, model_files);
  };
  return needs;
}

std::vector<std::string> listed_model_files(const Manifest& manifest) {
  std::vector<std::string> out;
  const auto& info = manifest.info;
  if (!info.is_object() || !info.contains("models") || !info["models"].is_object()) return out;
  for (const auto& [role, model] : info["models"].items())
    if (model.is_object() && model.contains("file") && model["file"].is_string())
      out.push_back(model["file"].get<std::string>());
  return out;
}

}  // namespace quartet
