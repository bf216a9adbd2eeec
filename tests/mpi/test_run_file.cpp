// The run file written by a group of ranks: numbers by one writer, rollouts collectively with
// each rank's rows at its offset (ranks with different prompt and action lengths), texts, the
// resume rule (an iteration already in the file is never written again), and clear errors for
// foreign and damaged files. Read back with the plain HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <torch/types.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "quartet/core/files.hpp"
#include "quartet/io/run_file.hpp"
#include "test_main.hpp"

using namespace quartet;

// Each test file in a namespace of its own: the test sources are compiled in unity batches.
namespace test_run_file {

namespace {

std::string test_dir(const std::string& name) {
  const char* base = std::getenv("QUARTET_PARITY_DIR");
  return std::string(base ? base : "/tmp") + "/run_file_" + name + "_np" + std::to_string(test::world().size());
}

IterationRecord record(int64_t it) {
  IterationRecord r;
  r.iteration = it;
  r.metrics = {{"reward_mean", 0.1 * static_cast<double>(it)}, {"kl", 1.0}};
  const int W = test::world().size();
  for (const char* p : {"generate", "train"}) {
    r.timing[p] = std::vector<double>(static_cast<size_t>(W), static_cast<double>(it));
    r.memory[p] = std::vector<double>(static_cast<size_t>(W), 0.0);
  }
  return r;
}

// Rank r holds r + 2 rows, a prompt of 3 + r tokens and 2 + r actions; every value says where
// it came from: 1000 * rank + 10 * row + column.
RolloutRecord rollouts(int64_t it) {
  const int64_t r = test::world().rank(), rows = r + 2, P = 3 + r, A = 2 + r;
  RolloutRecord ro;
  ro.iteration = it;
  auto grid = [&](int64_t cols) {
    return torch::arange(rows * cols, torch::kLong).view({rows, cols}) % cols +
           (torch::arange(rows, torch::kLong) * 10).view({rows, 1}) + 1000 * r;
  };
  ro.sequences = grid(P + A);
  ro.attention_mask = torch::ones({rows, P + A}, torch::kLong);
  ro.action_mask = torch::ones({rows, A}, torch::kLong);
  ro.scores = torch::full({rows}, static_cast<float>(r), torch::kFloat);
  ro.logprobs = grid(A).to(torch::kFloat);
  ro.advantages = grid(A).to(torch::kFloat);
  for (int64_t k = 0; k < rows; ++k) {
    ro.prompts.push_back("prompt " + std::to_string(r) + "." + std::to_string(k));
    ro.completions.push_back("completion " + std::to_string(r) + "." + std::to_string(k) + " ü");
  }
  return ro;
}

RunFileInfo info() {
  RunFileInfo i;
  i.version = "test";
  i.deck = "[run]\nname = test\n";
  i.world_size = test::world().size();
  i.iterations_planned = 5;
  return i;
}

std::vector<double> read_doubles(hid_t file, const char* name) {
  hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  hid_t space = H5Dget_space(set);
  hssize_t n = H5Sget_simple_extent_npoints(space);
  std::vector<double> v(static_cast<size_t>(n));
  H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(space);
  H5Dclose(set);
  return v;
}

TEST(RunFile, WritesNumbersRolloutsAndTextsAndResumesWithoutDuplicates) {
  const std::string dir = test_dir("basic");
  if (test::world().rank() == 0 && path_exists(dir + "/run.h5")) std::remove((dir + "/run.h5").c_str());
  MPI_Barrier(test::world().comm());
  {
    RunFile f(dir, test::world().comm(), info(), std::vector<double>(static_cast<size_t>(test::world().size()), 1e9));
    EXPECT_EQ(f.iterations_complete(), 0);
    for (int64_t it = 1; it <= 3; ++it) {
      RolloutRecord ro = rollouts(it);
      f.append(record(it), it != 2 ? &ro : nullptr);
    }
  }
  {
    // A resumed run: iterations 2 and 3 are in the file already and are skipped.
    RunFile f(dir, test::world().comm(), info(), {});
    EXPECT_EQ(f.iterations_complete(), 3);
    for (int64_t it = 2; it <= 5; ++it) f.append(record(it), nullptr);
    EXPECT_EQ(f.iterations_complete(), 5);
  }
  MPI_Barrier(test::world().comm());
  if (test::world().rank() != 0) return;
  hid_t file = H5Fopen((dir + "/run.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  auto iters = read_doubles(file, "metrics/iteration");
  EXPECT_EQ(iters, (std::vector<double>{1, 2, 3, 4, 5}));
  auto reward = read_doubles(file, "metrics/reward_mean");
  ASSERT_EQ(reward.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(reward[i], 0.1 * static_cast<double>(i + 1));
  auto timing = read_doubles(file, "timing/train");
  EXPECT_EQ(timing.size(), 5u * static_cast<size_t>(test::world().size()));
  EXPECT_GT(H5Lexists(file, "rollouts/000001", H5P_DEFAULT), 0);
  EXPECT_LE(H5Lexists(file, "rollouts/000002", H5P_DEFAULT), 0);

  // Every rank's rows at its offset, padded to the largest prompt (left) and action count (right).
  const int W = test::world().size();
  int64_t total = 0, Pm = 0, Am = 0;
  for (int r = 0; r < W; ++r) {
    total += r + 2;
    Pm = std::max<int64_t>(Pm, 3 + r);
    Am = std::max<int64_t>(Am, 2 + r);
  }
  hid_t set = H5Dopen2(file, "rollouts/000003/sequences", H5P_DEFAULT);
  hid_t space = H5Dget_space(set);
  hsize_t dims[2];
  H5Sget_simple_extent_dims(space, dims, nullptr);
  EXPECT_EQ(dims[0], static_cast<hsize_t>(total));
  EXPECT_EQ(dims[1], static_cast<hsize_t>(Pm + Am));
  std::vector<int64_t> seq(dims[0] * dims[1]);
  H5Dread(set, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, seq.data());
  H5Sclose(space);
  H5Dclose(set);
  int64_t row = 0;
  for (int r = 0; r < W; ++r) {
    const int64_t P = 3 + r, A = 2 + r;
    for (int64_t k = 0; k < r + 2; ++k, ++row)
      for (int64_t c = 0; c < P + A; ++c)
        EXPECT_EQ(seq[static_cast<size_t>(row * (Pm + Am) + (Pm - P) + c)], 1000 * r + 10 * k + c)
            << "rank " << r << " row " << k << " column " << c;
  }
  // Texts: every rank's, in rank order, UTF-8 intact.
  set = H5Dopen2(file, "rollouts/000003/completion", H5P_DEFAULT);
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  std::vector<char*> texts(static_cast<size_t>(total));
  H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, texts.data());
  EXPECT_EQ(std::string(texts[0]), "completion 0.0 ü");
  if (W > 1) {
    EXPECT_EQ(std::string(texts[2]), "completion 1.0 ü");
  }
  for (char* t : texts) H5free_memory(t);
  H5Tclose(type);
  H5Dclose(set);
  H5Fclose(file);

  const std::string summary = describe_run_file(dir + "/run.h5");
  EXPECT_NE(summary.find("iterations: 5 complete of 5 planned"), std::string::npos) << summary;
}

// /eval: evaluations travel with the iteration they follow (the one at 0 with iteration 1); a
// rewind drops those past the checkpoint; the run that resumes writes them again, once; a metric
// one evaluation lacks is NaN in its row.
TEST(RunFile, EvaluationsFollowTheirIterationsThroughARewind) {
  const std::string dir = test_dir("eval");
  if (test::world().rank() == 0 && path_exists(dir + "/run.h5")) std::remove((dir + "/run.h5").c_str());
  MPI_Barrier(test::world().comm());
  auto with_evals = [](int64_t it, std::vector<int64_t> points) {
    IterationRecord r = record(it);
    for (int64_t p : points) {
      EvalRecord e{p, {{"greedy_pass@1", 0.01 * static_cast<double>(p)}}};
      if (p != 4) e.metrics["pass@4"] = 0.02 * static_cast<double>(p);
      r.evals.push_back(e);
    }
    return r;
  };
  {
    RunFile f(dir, test::world().comm(), info(), {});
    f.append(with_evals(1, {0}), nullptr);
    for (int64_t it = 2; it <= 5; ++it)
      f.append(with_evals(it, it % 2 == 0 ? std::vector<int64_t>{it} : std::vector<int64_t>{}), nullptr);
  }
  {
    // Resumed from a checkpoint at 3: evaluation 4 goes, and comes back once.
    RunFile f(dir, test::world().comm(), info(), {});
    f.rewind(3);
    EXPECT_EQ(f.iterations_complete(), 3);
    if (test::world().rank() == 0) {
      hid_t file = H5Fopen((dir + "/run.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      EXPECT_EQ(read_doubles(file, "eval/iteration"), (std::vector<double>{0, 2}));
      EXPECT_EQ(read_doubles(file, "eval/pass@4").size(), 2u);
      H5Fclose(file);
    }
    for (int64_t it = 4; it <= 5; ++it) f.append(with_evals(it, {it}), nullptr);
  }
  MPI_Barrier(test::world().comm());
  if (test::world().rank() != 0) return;
  hid_t file = H5Fopen((dir + "/run.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  EXPECT_EQ(read_doubles(file, "eval/iteration"), (std::vector<double>{0, 2, 4, 5}));
  EXPECT_EQ(read_doubles(file, "eval/greedy_pass@1"), (std::vector<double>{0, 0.02, 0.04, 0.05}));
  const auto pass4 = read_doubles(file, "eval/pass@4");
  ASSERT_EQ(pass4.size(), 4u);
  EXPECT_DOUBLE_EQ(pass4[1], 0.04);
  EXPECT_TRUE(std::isnan(pass4[2]));  // evaluation 4 had none
  EXPECT_DOUBLE_EQ(pass4[3], 0.10);
  H5Fclose(file);
  const std::string summary = describe_run_file(dir + "/run.h5");
  EXPECT_NE(summary.find("eval points: 4 (iterations 0 2 4 5)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("greedy_pass@1"), std::string::npos) << summary;
}

TEST(RunFile, RefusesForeignAndDamagedFiles) {
  const std::string dir = test_dir("bad");
  if (test::world().rank() == 0) {
    make_directories(dir);
    hid_t f = H5Fcreate((dir + "/run.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
    std::ofstream(dir + "/text.h5") << "not hdf5\n";
  }
  MPI_Barrier(test::world().comm());
  const std::string err = test::error_of([&] { RunFile f(dir, test::world().comm(), info(), {}); });
  EXPECT_NE(err.find("not a quartet run file"), std::string::npos) << err;
  EXPECT_NE(err.find(dir + "/run.h5"), std::string::npos) << err;
  const std::string bad = test::error_of([&] { describe_run_file(dir + "/text.h5"); });
  EXPECT_NE(bad.find("not a readable HDF5 file"), std::string::npos) << bad;
}

}  // namespace

}  // namespace test_run_file
