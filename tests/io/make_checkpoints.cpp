// Checkpoints for the export and inspect tests, written the way the trainer writes them
// (src/rl/training_checkpoint.cpp): every model sharded over the ranks of the job (ShardedModel
// from source_random, one AdamW step so that weights and optimizer state are trained ones),
// one ShardedH5Writer file per trained model with the model and optimizer families and the
// root attributes, trainer.h5, then commit_checkpoint with the manifest's info. Beside each
// run it writes what the tests compare the exports against, taken from the models in memory:
//   <run>/reference/<role>_state.safetensors   full_state(): every weight, compute dtype
//   <run>/reference/<role>_outputs.h5          input_ids, attention_mask and the model's output
//                                              (logits, values or scores) on them, float32 models only
//   <work>/builtin_tokens.json                 the built-in tokenizer's ids for test strings
//
//   mpirun -np 2 io_make_checkpoints WORK TOKENIZER_DIR
// runs (each under WORK/<name>, replaced):
//   llama   Llama actor + critic, float32, built-in tokenizer, ppo; steps 2 and 3 complete
//           (`latest` = step_3) and an incomplete step_4 (begun, never committed)
//   gpt2    GPT-2 actor only (tied embeddings), float16, TOKENIZER_DIR's tokenizer, grpo
//   neox    GPT-NeoX actor + critic, bfloat16, built-in tokenizer
//   gptj    GPT-J actor + critic, float32 (HF has no GPTJForTokenClassification)
//   qwen3   Qwen3 actor + critic, float32: q/k norms, head_dim 12 (not hidden / heads), a
//           window of 4 on layer 1, q/k/v/o biases
//   mistral Mistral actor, float32, a window of 4 on every layer (the test batches are 9 long)
//   llama3  Llama actor, float32, Llama 3.1's rope scaling (original_max_position_embeddings 16
//           of max_position_embeddings 64)
//   reward  a Llama reward model alone (sequence_reward head, role "reward"), float32, built-in
//           tokenizer, one AdamW step on the Bradley–Terry loss (tune/pair_losses.hpp); its
//           reference output is the scores
//
//   io_make_checkpoints forward MODEL_DIR HEAD IN.h5 OUT.h5
// loads a Hugging Face directory with quartet (float32, CPU) and writes its output on IN.h5's
// input_ids / attention_mask to OUT.h5 ("output"): quartet's side of a comparison where
// Hugging Face has no class for the head (the GPT-J critic), or of its own loader's (a reward
// model's export).
//
//   io_make_checkpoints recommit STEP_DIR
// rewrites STEP_DIR's manifest over the files it holds now (tests/rl/check_checkpoint_identity.py:
// a file swapped in by hand, with a manifest that vouches for it).
#include <mpi.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "quartet/core/build_info.hpp"
#include "quartet/core/check.hpp"
#include "quartet/core/files.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/io/checkpoint_dir.hpp"
#include "quartet/io/sharded_h5.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/model/model_spec.hpp"
#include "quartet/model/tokenizer/tokenizer.hpp"
#include "quartet/model/transformer.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "quartet/tune/pair_losses.hpp"

using namespace quartet;

namespace {

struct RunSpec {
  const char* name;
  const char* family;
  torch::ScalarType dtype;
  bool critic;
  bool hf_tokenizer;  // TOKENIZER_DIR's tokenizer; else the built-in one
  const char* algorithm;
  bool reward_only = false;  // a trained reward model, no actor
};

const char* dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: return "float32";
  }
}

ModelConfig config_of(const RunSpec& s, const Tokenizer& tok) {
  ModelConfig c;
  c.model_type = s.family;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.max_positions = 64;
  c.vocab_size = tok.vocab_size();
  c.bos_token_id = tok.bos_id;
  c.eos_token_id = tok.eos_id;
  c.pad_token_id = tok.pad_id;
  // Odd widths and partial rotary, so that shapes and rotary dims are not all powers of two.
  const std::string f = s.family;
  if (f == "llama" || f == "mistral" || f == "qwen3") {
    c.num_kv_heads = 2;
    c.intermediate_size = 44;
    if (f == "mistral") c.sliding_window = 4;
    if (f == "qwen3") {
      c.head_dim = 12;
      c.attention_bias = true;
      c.sliding_window = 4;
      c.sliding_layers = {false, true};
    }
    if (std::string(s.name) == "llama3") {
      c.rope_scaling.type = "llama3";
      c.rope_scaling.factor = 8;
      c.rope_scaling.low_freq_factor = 1;
      c.rope_scaling.high_freq_factor = 4;
      c.rope_scaling.original_max_positions = 16;
    }
  } else if (f == "gpt2") {
    c.activation = "gelu_new";
    c.tie_word_embeddings = true;
    c.intermediate_size = 60;
  } else if (f == "gptj") {
    c.activation = "gelu_new";
    c.rotary_dim = 4;
    c.intermediate_size = 60;
  } else {
    c.activation = "gelu";
    c.parallel_residual = true;
    c.rotary_dim = 4;
    c.intermediate_size = 60;
  }
  c.complete(std::string("io test ") + s.name);
  return c;
}

// A left-padded batch (the same on every rank): row b has b % 3 padding tokens.
std::pair<torch::Tensor, torch::Tensor> batch_of(int64_t vocab, int64_t pad, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto ids = torch::randint(3, vocab, {4, 9}, gen, torch::kLong);  // no special tokens inside
  auto mask = torch::ones({4, 9}, torch::kLong);
  for (int64_t b = 0; b < 4; ++b) {
    mask[b].narrow(0, 0, b % 3).zero_();
    ids[b].narrow(0, 0, b % 3).fill_(pad);
  }
  return {ids, mask};
}

struct Trained {
  ModelSpec spec;
  std::unique_ptr<ShardedModel> model;
  std::unique_ptr<ShardedAdamW> optimizer;
};

// One AdamW step on a loss that depends on every output, so that every weight moves.
void train_step(Trained& t, uint64_t seed) {
  auto [ids, mask] = batch_of(t.spec.config.vocab_size, t.spec.config.pad_token_id.value_or(0), seed);
  t.model->zero_grad();
  auto out = t.model->forward(ids, mask).to(torch::kFloat);
  torch::Tensor loss;
  if (t.spec.head == Head::sequence_reward) {
    // Rows 0 and 1 preferred to rows 2 and 3, as `quartet rm` trains.
    loss = bradley_terry_loss(out.narrow(0, 0, 2), out.narrow(0, 2, 2)).loss;
  } else if (t.spec.head == Head::causal_lm) {
    auto logits = out.narrow(1, 0, out.size(1) - 1);
    loss = torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}),
                                                ids.narrow(1, 1, ids.size(1) - 1).reshape({-1}));
  } else {
    loss = (out - (ids.to(torch::kFloat) / 50.0 - 0.5)).pow(2).mean();
  }
  t.model->backward(loss);
  t.optimizer->step();
}

// As save_training_checkpoint's write_model.
void write_model(const std::string& dir, Trained& t, const char* role, int64_t iteration, MPI_Comm comm) {
  ShardedModel& model = *t.model;
  const auto& layout = model.layout();
  const int rank = model.group().rank();
  const std::string architecture = architecture_name(t.spec.config, t.spec.head);
  const char* dtype = dtype_name(model.options().dtype);
  ShardedH5Writer w(dir + "/" + role + ".h5", comm);
  w.write_family("model", layout, rank, model.current_shards(), model.options().dtype);
  w.write_family("optimizer/master", layout, rank, t.optimizer->master_shards(), torch::kFloat32);
  w.write_family("optimizer/exp_avg", layout, rank, t.optimizer->exp_avg_shards(), torch::kFloat32);
  w.write_family("optimizer/exp_avg_sq", layout, rank, t.optimizer->exp_avg_sq_shards(), torch::kFloat32);
  w.attribute("role", std::string(role));
  w.attribute("architecture", architecture);
  w.attribute("head", std::string(head_name(t.spec.head)));
  w.attribute("dtype", std::string(dtype));
  w.attribute("config_json", t.spec.config.to_json(architecture, dtype));
  w.attribute("group_size", static_cast<int64_t>(model.group().size()));
  w.attribute("iteration", iteration);
  w.attribute("optimizer_steps", t.optimizer->steps());
  w.close();
}

void write_checkpoint(const std::string& out, int64_t iteration, const RunSpec& s,
                      std::vector<std::pair<const char*, Trained*>> models, const std::string& tokenizer_dir,
                      MPI_Comm comm, int world_size) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::string dir = begin_checkpoint(out, iteration, comm);
  std::vector<std::string> files;
  for (auto& [role, t] : models) {
    write_model(dir, *t, role, iteration, comm);
    files.push_back(std::string(role) + ".h5");
  }
  if (rank == 0) write_tensors_h5(dir + "/trainer.h5", {{"iteration", torch::tensor({iteration}, torch::kInt64)}});
  files.push_back("trainer.h5");
  MPI_Barrier(comm);

  nlohmann::json info;
  info["run_name"] = s.name;
  info["iteration"] = iteration;
  info["world_size"] = world_size;
  std::string placement = "colocated:";
  for (size_t i = 0; i < models.size(); ++i)
    placement += std::string(i ? " |" : "") + " " + models[i].first + " ranks 0-" + std::to_string(world_size - 1);
  info["placement"] = placement;
  info["algorithm"] = s.algorithm;
  info["git_commit"] = quartet::git_commit();
  info["version"] = QUARTET_VERSION;
  info["deck"] = std::string("# io test run ") + s.name + "\n";
  info["trainer_state"] = "trainer.h5";
  info["models"] = nlohmann::json::object();
  for (auto& [role, t] : models) {
    const std::string architecture = architecture_name(t->spec.config, t->spec.head);
    int64_t parameters = 0;
    for (int64_t n : unit_parameter_counts(t->spec.config, t->spec.head)) parameters += n;
    nlohmann::json m;
    m["file"] = std::string(role) + ".h5";
    m["group_size"] = world_size;
    m["architecture"] = architecture;
    m["head"] = head_name(t->spec.head);
    m["dtype"] = dtype_name(t->spec.dtype);
    m["config_json"] = t->spec.config.to_json(architecture, dtype_name(t->spec.dtype));
    m["source"] = std::string("random:") + s.family;
    m["tokenizer_dir"] = tokenizer_dir;
    m["parameters"] = parameters;
    m["optimizer_steps"] = t->optimizer->steps();
    info["models"][role] = m;
  }
  commit_checkpoint(out, iteration, files, info, comm, /*keep=*/2, /*keep_every=*/0);
}

void make_run(const std::string& work, const RunSpec& s, const std::string& tokenizer_dir, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string out = work + "/" + s.name;
  if (rank == 0) {
    remove_tree(out);
    make_directories(out + "/reference");
  }
  MPI_Barrier(comm);

  auto tok = s.hf_tokenizer ? load_model_tokenizer(tokenizer_dir) : make_builtin_tokenizer();
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(r);
  auto group = make_mpi_collectives(s.name, ranks, comm, nullptr);

  std::vector<std::pair<const char*, Head>> roles = {{"actor", Head::causal_lm}};
  if (s.critic) roles.push_back({"critic", Head::token_value});
  if (s.reward_only) roles = {{"reward", Head::sequence_reward}};
  std::vector<std::unique_ptr<Trained>> trained;
  for (size_t i = 0; i < roles.size(); ++i) {
    auto t = std::make_unique<Trained>();
    t->spec.config = config_of(s, *tok);
    t->spec.head = roles[i].second;
    t->spec.dtype = s.dtype;
    t->spec.random = true;
    t->spec.trained = true;
    ShardOptions so;
    so.dtype = s.dtype;
    t->model = std::make_unique<ShardedModel>(t->spec.config, t->spec.head, *group, so,
                                              source_random(t->spec.config, 11 + i, torch::kCPU));
    AdamWOptions ao;
    ao.lr = 1e-2;
    ao.weight_decay = 0.1;
    t->optimizer = std::make_unique<ShardedAdamW>(*t->model, ao);
    trained.push_back(std::move(t));
  }
  std::vector<std::pair<const char*, Trained*>> models;
  for (size_t i = 0; i < roles.size(); ++i) models.push_back({roles[i].first, trained[i].get()});

  const std::string tokdir = s.hf_tokenizer ? tokenizer_dir : "";
  const bool two_steps = std::string(s.name) == "llama";
  for (auto& [role, t] : models) train_step(*t, 100);
  if (two_steps) {
    write_checkpoint(out, 2, s, models, tokdir, comm, size);
    for (auto& [role, t] : models) train_step(*t, 101);
  }
  write_checkpoint(out, 3, s, models, tokdir, comm, size);
  if (two_steps) begin_checkpoint(out, 4, comm);  // never committed: an interrupted write

  for (auto& [role, t] : models) {
    NamedTensors state = t->model->full_state();
    torch::Tensor output;
    auto [ids, mask] = batch_of(t->spec.config.vocab_size, t->spec.config.pad_token_id.value_or(0), 7);
    {
      torch::NoGradGuard no_grad;
      output = t->model->forward(ids, mask).to(torch::kFloat);
    }
    if (rank == 0) {
      save_safetensors(out + "/reference/" + role + "_state.safetensors", state, {{"format", "pt"}});
      if (s.dtype == torch::kFloat32)
        write_tensors_h5(out + "/reference/" + role + "_outputs.h5",
                         {{"input_ids", ids}, {"attention_mask", mask}, {"output", output}});
    }
  }
  if (rank == 0) std::printf("io_make_checkpoints: %s -> %s\n", s.name, out.c_str());
}

void builtin_tokens(const std::string& work) {
  auto tok = make_builtin_tokenizer();
  nlohmann::json all = nlohmann::json::array();
  for (const char* text : {"hello world", "  two  spaces ", "Sort 3 1 2 -> 1 2 3", "a<eos>b<bos>c<pad>", "",
                           "{\"json\": [1, 2.5e-3]} \\ ~ `", "x"}) {
    nlohmann::json e;
    e["text"] = text;
    e["ids"] = tok->encode(text, true);
    e["ids_plain"] = tok->encode(text, false);
    e["decoded"] = tok->decode(tok->encode(text, true), false);
    e["decoded_skip"] = tok->decode(tok->encode(text, true), true);
    all.push_back(e);
  }
  write_text_atomically(work + "/builtin_tokens.json", all.dump(2) + "\n");
}

int forward_mode(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s forward MODEL_DIR causal_lm|token_value|sequence_reward IN.h5 OUT.h5\n", argv[0]);
    return 2;
  }
  const std::string head_text = argv[3];
  const Head head = head_text == "token_value"       ? Head::token_value
                    : head_text == "sequence_reward" ? Head::sequence_reward
                                                     : Head::causal_lm;
  auto model = load_model(argv[2], head, torch::kFloat32, torch::kCPU);
  model->eval();
  auto ids = read_tensor_h5(argv[4], "input_ids"), mask = read_tensor_h5(argv[4], "attention_mask");
  torch::NoGradGuard no_grad;
  write_tensors_h5(argv[5], {{"output", model->forward(ids, mask).to(torch::kFloat)}});
  return 0;
}

// What someone who edits a checkpoint by hand can do: have the manifest vouch again for whatever
// files the step directory holds now (new sizes and checksums, its description kept).
int recommit_mode(int argc, char** argv) {
  QUARTET_CHECK(argc == 3, "usage: io_make_checkpoints recommit STEP_DIR");
  const std::string step = strip_trailing_slashes(argv[2]);
  const Manifest m = read_manifest(step);
  std::vector<std::string> files;
  for (const std::string& name : list_directory(step))
    if (name != "manifest.json") files.push_back(name);
  std::remove((step + "/manifest.json").c_str());
  const std::string out = parent_directory(parent_directory(step));
  quartet::detail::commit_checkpoint(out, m.iteration, files, m.info, MPI_COMM_NULL, /*keep=*/1000, /*keep_every=*/0,
                            m.chunk_bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "recommit") {
    try {
      return recommit_mode(argc, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "io_make_checkpoints recommit: %s\n", e.what());
      return 1;
    }
  }
  if (argc > 1 && std::string(argv[1]) == "forward") {
    try {
      return forward_mode(argc, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "io_make_checkpoints forward: %s\n", e.what());
      return 1;
    }
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: mpirun -np N %s WORK TOKENIZER_DIR\n", argv[0]);
    return 2;
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  torch::set_num_threads(1);
  const std::string work = argv[1], tokenizer_dir = argv[2];
  const RunSpec runs[] = {
      {"llama", "llama", torch::kFloat32, true, false, "ppo"},
      {"gpt2", "gpt2", torch::kFloat16, false, true, "grpo"},
      {"neox", "gpt_neox", torch::kBFloat16, true, false, "ppo"},
      {"gptj", "gptj", torch::kFloat32, true, false, "ppo"},
      {"qwen3", "qwen3", torch::kFloat32, true, false, "ppo"},
      {"mistral", "mistral", torch::kFloat32, false, false, "grpo"},
      {"llama3", "llama", torch::kFloat32, false, false, "grpo"},
      {"reward", "llama", torch::kFloat32, false, false, "rm", true},
  };
  int status = 0;
  try {
    if (rank == 0) {
      make_directories(work);
      builtin_tokens(work);
    }
    for (const RunSpec& s : runs) make_run(work, s, tokenizer_dir, MPI_COMM_WORLD);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "io_make_checkpoints (rank %d): %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
