// The checkpoint's sharded tensor format: a model and its optimizer, trained for two steps on
// W = 1, 2 or 4 ranks, written collectively, read back by a group of another size (resharding
// on load) and written again by it, read by the whole world again: every tensor and the step
// count come back bitwise, and training continues bitwise as the original does. Also: the N-D
// block decomposition of flat ranges against brute force, bfloat16 read by h5py, files and
// datasets that are missing, misshapen or truncated, and the write/read throughput.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>

#include "quartet/core/files.hpp"
#include "quartet/dist/collectives.hpp"
#include "quartet/io/sharded_h5.hpp"
#include "quartet/io/tensor_h5.hpp"
#include "quartet/shard/sharded_adamw.hpp"
#include "quartet/shard/sharded_model.hpp"
#include "test_main.hpp"

using namespace quartet;

namespace {

// ---- flat ranges as N-D blocks (pure; every rank checks the same cases) ----------------------

// The flat indices of the blocks' elements, each block in row-major order, blocks in order.
std::vector<int64_t> elements_of(const std::vector<Block>& blocks, const std::vector<int64_t>& shape) {
  std::vector<int64_t> stride(shape.size(), 1), out;
  for (size_t k = shape.size(); k-- > 1;) stride[k - 1] = stride[k] * shape[k];
  for (const auto& b : blocks) {
    std::vector<int64_t> idx(b.start.size(), 0);
    while (true) {
      int64_t flat = 0;
      for (size_t k = 0; k < idx.size(); ++k) flat += (b.start[k] + idx[k]) * stride[k];
      out.push_back(flat);
      size_t k = idx.size();
      while (k > 0 && ++idx[k - 1] == b.extent[k - 1]) idx[--k] = 0;
      if (k == 0) break;
    }
  }
  return out;
}

TEST(FlatRangeBlocks, MatchBruteForce) {
  std::mt19937_64 rng(12345);
  int cases = 0;
  for (int it = 0; it < 3000; ++it) {
    const int dims = static_cast<int>(rng() % 5);  // 0-D (one element) to 4-D
    std::vector<int64_t> shape;
    for (int d = 0; d < dims; ++d) shape.push_back(1 + static_cast<int64_t>(rng() % 6));
    const int64_t numel = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
    const int64_t begin = static_cast<int64_t>(rng() % static_cast<uint64_t>(numel + 1));
    const int64_t count = static_cast<int64_t>(rng() % static_cast<uint64_t>(numel - begin + 1));
    const auto blocks = flat_range_blocks(shape, begin, count);
    std::vector<int64_t> expected(static_cast<size_t>(count));
    std::iota(expected.begin(), expected.end(), begin);
    ASSERT_EQ(elements_of(blocks, shape), expected)
        << "shape " << c10::IntArrayRef(shape) << " range [" << begin << ", " << begin + count << ")";
    EXPECT_LE(blocks.size(), static_cast<size_t>(std::max(1, 2 * dims - 1))) << c10::IntArrayRef(shape);
    for (const auto& b : blocks) {
      ASSERT_EQ(b.start.size(), shape.size());
      for (size_t k = 0; k < shape.size(); ++k) {
        EXPECT_GT(b.extent[k], 0);
        EXPECT_LE(b.start[k] + b.extent[k], shape[k]);
      }
    }
    cases += count > 0;
  }
  EXPECT_GT(cases, 1500);
  // A whole matrix is one block; a range outside the tensor is refused.
  EXPECT_EQ(flat_range_blocks({7, 5}, 0, 35).size(), 1u);
  EXPECT_EQ(flat_range_blocks({7, 5}, 10, 15).size(), 1u);  // rows 2..4 exactly
  EXPECT_TRUE(flat_range_blocks({0, 5}, 0, 0).empty());
  EXPECT_NE(test::error_of([] { flat_range_blocks({7, 5}, 30, 6); }).find("outside a tensor of shape [7, 5]"),
            std::string::npos);
}

// ---- models ---------------------------------------------------------------------------------

ModelConfig tiny_llama(int64_t layers = 3, int64_t intermediate = 37) {
  ModelConfig m;
  m.model_type = "llama";
  m.vocab_size = 53;
  m.hidden_size = 24;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.intermediate_size = intermediate;
  m.max_positions = 64;
  m.activation = "silu";
  m.complete("test config");
  return m;
}

std::unique_ptr<Collectives> collectives_over(MPI_Comm comm, const std::string& name) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  MPI_Group g, wg;
  MPI_Comm_group(comm, &g);
  MPI_Comm_group(test::world().comm(), &wg);
  std::vector<int> local(static_cast<size_t>(size)), ranks(static_cast<size_t>(size));
  std::iota(local.begin(), local.end(), 0);
  MPI_Group_translate_ranks(g, size, local.data(), wg, ranks.data());
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  return make_mpi_collectives(name, ranks, comm, nullptr);
}

// One training step on a global batch of 8 sequences, this rank's rows of it.
void train_step(ShardedModel& m, ShardedAdamW& o, uint64_t seed) {
  const int W = m.group().size(), r = m.group().rank();
  auto gen = at::detail::createCPUGenerator(seed);
  auto ids = torch::randint(m.config().vocab_size, {8, 9}, gen, torch::kLong).narrow(0, r * (8 / W), 8 / W);
  auto mask = torch::ones_like(ids);
  m.zero_grad();
  auto logits = m.forward(ids, mask).to(torch::kFloat32);
  auto lg = logits.narrow(1, 0, logits.size(1) - 1);
  auto loss = torch::cross_entropy_loss(lg.reshape({-1, lg.size(-1)}),
                                                   ids.narrow(1, 1, ids.size(1) - 1).reshape({-1}));
  m.backward(loss);
  o.step();
}

AdamWOptions adam() {
  AdamWOptions ao;
  ao.lr = 1e-2;
  ao.eps = 1e-4;
  ao.weight_decay = 0.1;
  return ao;
}

// Bit patterns equal (not only values: -0.0 vs 0.0 and NaN payloads count).
bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const auto as = a.element_size() == 2 ? torch::kInt16 : torch::kInt32;
  return torch::equal(a.contiguous().view(as), b.contiguous().view(as));
}

void expect_same(const NamedTensors& got, const NamedTensors& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << what;
    EXPECT_TRUE(bitwise_equal(got[i].second, want[i].second)) << what << ": " << got[i].first;
  }
}

// The checkpoint's actor file: weights in the compute dtype, float32 master and moments.
void write_trained(const std::string& path, MPI_Comm comm, ShardedModel& m, ShardedAdamW& o) {
  ShardedH5Writer w(path, comm);
  const int r = m.group().rank();
  w.write_family("model", m.layout(), r, m.param_shards(), m.options().dtype);
  w.write_family("optimizer/master", m.layout(), r, o.master_shards(), torch::kFloat32);
  w.write_family("optimizer/exp_avg", m.layout(), r, o.exp_avg_shards(), torch::kFloat32);
  w.write_family("optimizer/exp_avg_sq", m.layout(), r, o.exp_avg_sq_shards(), torch::kFloat32);
  w.attribute("steps", o.steps());
  w.attribute("software", std::string("quartet"));
  w.close();
}

void load_optimizer(ShardedAdamW& o, const ShardedH5Reader& reader) {
  o.load_sliced(reader.source("optimizer/master"), reader.source("optimizer/exp_avg"),
                reader.source("optimizer/exp_avg_sq"), reader.int_attribute("steps"));
}

std::string test_dir() {
  const char* base = std::getenv("QUARTET_PARITY_DIR");
  const std::string dir = std::string(base ? base : "/tmp") + "/sharded_h5_np" + std::to_string(test::world().size());
  if (test::world().rank() == 0) make_directories(dir);
  MPI_Barrier(test::world().comm());
  return dir;
}

// h5py (QUARTET_PYTHON) reads every dataset of `group` with .astype('f4') and compares it with
// the float32 reference file (h5py reports the stored 2-byte type as float32, so the on-disk
// size is checked through the type itself). 0: equal; 3: no h5py there; other: a mismatch (printed).
int h5py_compare(const std::string& file, const std::string& group, const std::string& reference) {
  const char* py = std::getenv("QUARTET_PYTHON");
  if (!py || !*py) return 3;
  const std::string script = reference + ".py";
  std::ofstream(script) << "import sys\n"
                           "try:\n    import h5py, numpy as np\nexcept ImportError:\n    sys.exit(3)\n"
                           "f = h5py.File(sys.argv[1], 'r'); g = h5py.File(sys.argv[3], 'r')\n"
                           "bad = 0\n"
                           "for name in g:\n"
                           "    d = f[sys.argv[2]][name]\n"
                           "    got = d.astype('f4')[()]\n"
                           "    if d.id.get_type().get_size() != 2 or not np.array_equal(got, g[name][()]):\n"
                           "        print('mismatch', name, d.dtype, flush=True); bad += 1\n"
                           "print('h5py compared', len(g), 'datasets of 2-byte floats as float32:', 'mismatch' if bad else 'equal')\n"
                           "sys.exit(1 if bad else 0)\n";
  const std::string cmd = std::string(py) + " " + script + " " + file + " " + group + " " + reference;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// ---- resharding round trip ------------------------------------------------------------------

class ShardedH5 : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(ShardedH5, ReshardsModelAndOptimizer) {
  const torch::ScalarType dtype = GetParam();
  const ModelConfig cfg = tiny_llama();
  const int W = test::world().size(), r = test::world().rank();
  const std::string dir = test_dir(), tag = dtype == torch::kBFloat16 ? "bf16" : "f32";
  auto world = collectives_over(test::world().comm(), "world");
  ShardOptions so;
  so.dtype = dtype;
  const AdamWOptions ao = adam();

  ShardedModel a(cfg, Head::causal_lm, *world, so, source_random(cfg, 21, torch::kCPU));
  ShardedAdamW oa(a, ao);
  train_step(a, oa, 1);
  train_step(a, oa, 2);
  const NamedTensors model_state = a.full_state(), opt_state = oa.full_state();
  const std::string first = dir + "/" + tag + "_w" + std::to_string(W) + ".h5";
  write_trained(first, test::world().comm(), a, oa);

  // Without MPI (the tools' path): whole tensors, names, dtypes, attributes.
  {
    ShardedH5Reader plain(first, MPI_COMM_NULL);
    std::vector<std::string> names;
    for (const auto& [name, t] : model_state) {
      names.push_back(name);
      EXPECT_EQ(plain.dtype("model/" + name), dtype) << name;
      EXPECT_EQ(plain.shape("model/" + name), t.sizes().vec()) << name;
      EXPECT_TRUE(bitwise_equal(plain.read("model/" + name), t)) << name;
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(plain.names("model"), names);
    EXPECT_EQ(plain.dtype("optimizer/exp_avg/" + names[0]), torch::kFloat32);
    for (const auto& [name, t] : opt_state) {
      const auto dot = name.rfind('.');  // "<param>.master" -> optimizer/master/<param>
      EXPECT_TRUE(bitwise_equal(plain.read("optimizer/" + name.substr(dot + 1) + "/" + name.substr(0, dot)), t))
          << name;
    }
    EXPECT_EQ(plain.int_attribute("steps"), 2);
    EXPECT_EQ(plain.string_attribute("software"), "quartet");
    EXPECT_TRUE(plain.has("optimizer/master/" + names[0]));
    EXPECT_FALSE(plain.has("optimizer/master"));  // a group, not a dataset
    EXPECT_FALSE(plain.has("optimizer/nothing/here"));
  }
  // h5py reads bfloat16 as float32 exactly (rank 0 asks it).
  if (dtype == torch::kBFloat16 && r == 0) {
    NamedTensors as_f32;
    for (const auto& [name, t] : model_state) as_f32.emplace_back(name, t.to(torch::kFloat32));
    const std::string ref = dir + "/bf16_reference.h5";
    write_tensors_h5(ref, as_f32);
    const int rc = h5py_compare(first, "model", ref);
    if (rc == 3) std::printf("note: no h5py at QUARTET_PYTHON, bfloat16 not checked from Python\n");
    else EXPECT_EQ(rc, 0) << "h5py disagrees about the bfloat16 datasets of " << first;
  }

  // (i) A group of another size (4 -> 2, 2 -> 1, 1 -> 1) loads its slices.
  const int half = std::max(1, W / 2), color = r / half;
  MPI_Comm sub;
  MPI_Comm_split(test::world().comm(), color, r, &sub);
  const std::string second = dir + "/" + tag + "_w" + std::to_string(W) + "_to" + std::to_string(half) + ".h5";
  {
    auto group = collectives_over(sub, "half");
    ShardedH5Reader reader(first, sub);
    // Each rank reads exactly the parameter elements of its own shards, nothing more.
    int64_t asked = 0;
    auto counted = [&asked, source = reader.source("model")](const std::string& name, const std::vector<int64_t>& shape,
                                                             int64_t begin, int64_t count) {
      asked += count;
      return source(name, shape, begin, count);
    };
    ShardedModel b(cfg, Head::causal_lm, *group, so, counted);
    int64_t own = 0;
    for (const auto& u : b.layout())
      own += std::clamp<int64_t>(u.numel - group->rank() * u.shard, 0, u.shard);
    EXPECT_EQ(asked, own);
    ShardedAdamW ob(b, ao);
    load_optimizer(ob, reader);
    EXPECT_EQ(ob.steps(), 2);
    expect_same(b.full_state(), model_state, "model on " + std::to_string(half) + " ranks");
    expect_same(ob.full_state(), opt_state, "optimizer on " + std::to_string(half) + " ranks");
    // (ii) and writes it again, for the whole world to read.
    if (color == 0) write_trained(second, sub, b, ob);
  }
  MPI_Comm_free(&sub);
  MPI_Barrier(test::world().comm());
  {
    ShardedH5Reader reader(second, test::world().comm());
    ShardedModel c(cfg, Head::causal_lm, *world, so, reader.source("model"));
    ShardedAdamW oc(c, ao);
    load_optimizer(oc, reader);
    EXPECT_EQ(oc.steps(), 2);
    expect_same(c.full_state(), model_state, "model back on " + std::to_string(W) + " ranks");
    expect_same(oc.full_state(), opt_state, "optimizer back on " + std::to_string(W) + " ranks");
    // Training goes on as if nothing had happened.
    train_step(a, oa, 3);
    train_step(c, oc, 3);
    EXPECT_EQ(oc.steps(), 3);
    expect_same(c.full_state(), a.full_state(), "model after one more step");
    expect_same(oc.full_state(), oa.full_state(), "optimizer after one more step");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ShardedH5, ::testing::Values(torch::kFloat32, torch::kBFloat16),
                         [](const auto& info) { return info.param == torch::kFloat32 ? "float32" : "bfloat16"; });

// ---- errors name the file and what is wrong -------------------------------------------------

TEST(ShardedH5Errors, NameFileDatasetAndShapes) {
  const ModelConfig cfg = tiny_llama();
  const int r = test::world().rank();
  const std::string dir = test_dir(), path = dir + "/errors.h5";
  auto world = collectives_over(test::world().comm(), "world");
  ShardOptions so;
  ShardedModel a(cfg, Head::causal_lm, *world, so, source_random(cfg, 5, torch::kCPU));
  ShardedAdamW oa(a, adam());
  write_trained(path, test::world().comm(), a, oa);
  {
    ShardedH5Reader reader(path, test::world().comm());
    // One more layer than the file has: the first missing dataset is named.
    const ModelConfig deeper = tiny_llama(4);
    std::string err = test::error_of([&] { ShardedModel bad(deeper, Head::causal_lm, *world, so, reader.source("model")); });
    EXPECT_NE(err.find(path + ": dataset 'model/model.layers.3."), std::string::npos) << err;
    EXPECT_NE(err.find("is missing"), std::string::npos) << err;
    // A wider MLP: the dataset and both shapes are named.
    const ModelConfig wider = tiny_llama(3, 38);
    err = test::error_of([&] { ShardedModel bad(wider, Head::causal_lm, *world, so, reader.source("model")); });
    EXPECT_NE(err.find(path + ": dataset 'model/model.layers.0.mlp.gate_proj.weight' has shape [37, 24], "
                              "the model expects [38, 24]"),
              std::string::npos)
        << err;
    // An optimizer family that is not there.
    err = test::error_of([&] {
      oa.load_sliced(reader.source("optimizer/master"), reader.source("optimizer/momentum"),
                     reader.source("optimizer/exp_avg_sq"), 1);
    });
    EXPECT_NE(err.find("dataset 'optimizer/momentum/model.embed_tokens.weight' is missing"), std::string::npos) << err;
    err = test::error_of([&] { reader.read_flat("model/model.norm.weight", 20, 5); });
    EXPECT_NE(err.find("dataset 'model/model.norm.weight': elements [20, 25) asked of shape [24]"), std::string::npos)
        << err;
    EXPECT_NE(test::error_of([&] { reader.int_attribute("iteration"); }).find(path + ": no root attribute 'iteration'"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { reader.shape("model/nope"); }).find(path + ": no dataset 'model/nope'"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { reader.names("optimizer/nope"); }).find(path + ": no group 'optimizer/nope'"),
              std::string::npos);
  }
  MPI_Barrier(test::world().comm());

  // A file cut in half (a job killed mid-copy), another format, no file.
  if (r == 0) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(::truncate(path.c_str(), st.st_size / 2), 0);
    std::ofstream(dir + "/not_hdf5.h5") << "these are not the bytes you are looking for\n";
  }
  MPI_Barrier(test::world().comm());
  for (MPI_Comm comm : {test::world().comm(), MPI_COMM_NULL}) {
    const std::string err = test::error_of([&] { ShardedH5Reader reader(path, comm); });
    EXPECT_NE(err.find(path + ": not a readable HDF5 file (truncated"), std::string::npos) << err;
  }
  std::string err = test::error_of([&] { ShardedH5Reader reader(dir + "/not_hdf5.h5", MPI_COMM_NULL); });
  EXPECT_NE(err.find(dir + "/not_hdf5.h5: not a readable HDF5 file"), std::string::npos) << err;
  err = test::error_of([&] { ShardedH5Reader reader(dir + "/absent.h5", MPI_COMM_NULL); });
  EXPECT_NE(err.find(dir + "/absent.h5: no such file"), std::string::npos) << err;
  // A layout made for another group size is refused before anything is written.
  if (r == 0 && test::world().size() > 1) {
    MPI_Comm self;
    MPI_Comm_split(MPI_COMM_SELF, 0, 0, &self);
    {
      ShardedH5Writer w(dir + "/wrong_layout.h5", self);
      err = test::error_of([&] { w.write_family("model", a.layout(), 0, a.param_shards(), torch::kFloat32); });
    }
    MPI_Comm_free(&self);
    EXPECT_NE(err.find("was made for a group of"), std::string::npos) << err;
  }
  MPI_Barrier(test::world().comm());
}

// ---- throughput ---------------------------------------------------------------------------

// A GPT-J-shaped layout (hidden H, L blocks, vocabulary V) for a group of W ranks, without a
// model: QUARTET_H5_BENCH="H,L,V" scales it (e.g. "1024,6,16000": 108M parameters).
std::vector<UnitLayout> gptj_like_layout(int64_t H, int64_t L, int64_t V, int W) {
  std::vector<UnitLayout> units(static_cast<size_t>(L + 1));
  auto add = [](UnitLayout& u, const std::string& name, std::vector<int64_t> shape) {
    FlatParam p;
    p.name = name;
    p.shape = shape;
    p.numel = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<int64_t>());
    p.offset = u.numel;
    u.numel += p.numel;
    u.params.push_back(p);
  };
  units[0].name = "root";
  add(units[0], "transformer.wte.weight", {V, H});
  add(units[0], "transformer.ln_f.weight", {H});
  add(units[0], "transformer.ln_f.bias", {H});
  add(units[0], "lm_head.weight", {V, H});
  add(units[0], "lm_head.bias", {V});
  for (int64_t i = 0; i < L; ++i) {
    UnitLayout& u = units[static_cast<size_t>(i + 1)];
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    u.name = "block " + std::to_string(i);
    add(u, b + "ln_1.weight", {H});
    add(u, b + "ln_1.bias", {H});
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"}) add(u, b + "attn." + m + ".weight", {H, H});
    add(u, b + "mlp.fc_in.weight", {4 * H, H});
    add(u, b + "mlp.fc_in.bias", {4 * H});
    add(u, b + "mlp.fc_out.weight", {H, 4 * H});
    add(u, b + "mlp.fc_out.bias", {H});
  }
  const int64_t q = kShardAlign * W;
  for (auto& u : units) {
    u.padded = (u.numel + q - 1) / q * q;
    u.shard = u.padded / W;
  }
  return units;
}

TEST(ShardedH5Throughput, WriteAndReadBack) {
  int64_t H = 256, L = 4, V = 4000;
  if (const char* s = std::getenv("QUARTET_H5_BENCH")) {
    long long h = 0, l = 0, v = 0;
    ASSERT_EQ(std::sscanf(s, "%lld,%lld,%lld", &h, &l, &v), 3) << "QUARTET_H5_BENCH=H,L,V";
    H = h, L = l, V = v;
  }
  const int W = test::world().size(), r = test::world().rank();
  MPI_Comm comm = test::world().comm();
  const auto layout = gptj_like_layout(H, L, V, W);
  int64_t params = 0;
  for (const auto& u : layout) params += u.numel;
  // The actor file: bf16 weights, float32 master and two moments (random, distinct per family).
  const char* families[] = {"model", "optimizer/master", "optimizer/exp_avg", "optimizer/exp_avg_sq"};
  const torch::ScalarType dtypes[] = {torch::kBFloat16, torch::kFloat32, torch::kFloat32, torch::kFloat32};
  std::vector<std::vector<torch::Tensor>> shards(4);
  auto gen = at::detail::createCPUGenerator(100 + static_cast<uint64_t>(r));
  for (int f = 0; f < 4; ++f)
    for (const auto& u : layout) shards[f].push_back(torch::randn({u.shard}, gen).to(dtypes[f]));
  const double bytes = static_cast<double>(params) * (2 + 4 + 4 + 4);
  const std::string path = test_dir() + "/throughput.h5";

  using clock = std::chrono::steady_clock;
  MPI_Barrier(comm);
  auto t0 = clock::now();
  {
    ShardedH5Writer w(path, comm);
    for (int f = 0; f < 4; ++f) w.write_family(families[f], layout, r, shards[f], dtypes[f]);
    w.close();
  }
  MPI_Barrier(comm);
  const double write_s = std::chrono::duration<double>(clock::now() - t0).count();

  t0 = clock::now();
  std::vector<std::vector<torch::Tensor>> back(4);
  {
    ShardedH5Reader reader(path, comm);
    for (int f = 0; f < 4; ++f) {
      auto source = reader.source(families[f]);
      for (const auto& u : layout) {
        back[f].push_back(torch::empty({u.shard}, torch::TensorOptions().dtype(dtypes[f])));
        fill_shard(u, r, source, back[f].back());
      }
    }
  }
  MPI_Barrier(comm);
  const double read_s = std::chrono::duration<double>(clock::now() - t0).count();
  for (int f = 0; f < 4; ++f)
    for (size_t u = 0; u < layout.size(); ++u) {
      // The padding is not stored: compare the parameters' part of the shard.
      const int64_t begin = r * layout[u].shard, n = std::clamp<int64_t>(layout[u].numel - begin, 0, layout[u].shard);
      EXPECT_TRUE(bitwise_equal(back[f][u].narrow(0, 0, n), shards[f][u].narrow(0, 0, n)))
          << families[f] << " unit " << u;
    }
  if (r == 0) {
    std::printf("sharded_h5 throughput: %lld parameters (%.1f MB in 4 families, %zu datasets) on %d ranks: "
                "write %.2f s = %.0f MB/s, read %.2f s = %.0f MB/s\n",
                static_cast<long long>(params), bytes / 1e6, 4 * (layout.size() - 1) * 11 + 4 * 5, W, write_s,
                bytes / 1e6 / write_s, read_s, bytes / 1e6 / read_s);
    std::fflush(stdout);
    ::unlink(path.c_str());
  }
}

}  // namespace
