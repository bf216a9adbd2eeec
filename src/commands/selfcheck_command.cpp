#include "quartet/commands/selfcheck_command.hpp"

#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "quartet/core/check.hpp"
#include "quartet/core/log.hpp"
#include "quartet/core/run_config.hpp"
#include "quartet/dist/exchange.hpp"
#include "quartet/dist/gather_text.hpp"
#include "quartet/dist/placement.hpp"

namespace quartet {
namespace {

using Clock = std::chrono::steady_clock;

// Rank r's input: small integers, so sums over any group up to 128 ranks are exact in bf16.
torch::Tensor input_of(int r, int64_t n, torch::ScalarType dtype) {
  return torch::arange(n, torch::kLong).add(r).remainder(3).to(dtype);
}

struct Row {
  std::string op, dtype;
  int64_t numel;
  bool ok;
  double ms;
};

class GroupCheck {
 public:
  GroupCheck(Collectives& c, torch::Device device) : c_(c), device_(device) {}

  void run_all() {
    for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kLong})
      for (int64_t n : {int64_t(1), int64_t(4097), int64_t(1) << 18}) check(dtype, n);
  }
  const std::vector<Row>& rows() const { return rows_; }

 private:
  void check(torch::ScalarType dtype, int64_t n) {
    const int p = c_.size(), me = c_.rank();
    auto cpu = torch::TensorOptions().dtype(dtype);
    auto on_dev = [&](const torch::Tensor& t) { return t.to(device_); };
    // The serial reference, from every rank's input made here.
    auto sum = torch::zeros({n}, torch::kDouble);
    for (int r = 0; r < p; ++r) sum += input_of(r, n, torch::kDouble);

    auto t = on_dev(input_of(me, n, dtype));
    time("all_reduce sum", dtype, n, [&] { c_.all_reduce(t, ReduceOp::sum); },
         [&] { return t.cpu().to(torch::kDouble).equal(sum); });
    if (torch::isFloatingType(dtype)) {
      auto a = on_dev(input_of(me, n, dtype));
      time("all_reduce avg", dtype, n, [&] { c_.all_reduce(a, ReduceOp::avg); },
           [&] { return torch::allclose(a.cpu().to(torch::kDouble), sum / p, 1.0 / 128, 0); });
    }
    auto gathered = torch::empty({n * p}, cpu.device(device_));
    auto in = on_dev(input_of(me, n, dtype));
    time("all_gather", dtype, n, [&] { c_.all_gather(in, gathered); }, [&] {
      bool ok = true;
      auto g = gathered.cpu();
      for (int r = 0; r < p; ++r) ok &= g.slice(0, r * n, (r + 1) * n).equal(input_of(r, n, dtype));
      return ok;
    });
    auto full = torch::zeros({n * p}, torch::kDouble);
    for (int r = 0; r < p; ++r) full += input_of(r, n * p, torch::kDouble);
    auto big = on_dev(input_of(me, n * p, dtype));
    auto mine = torch::empty({n}, cpu.device(device_));
    time("reduce_scatter sum", dtype, n, [&] { c_.reduce_scatter(big, mine, ReduceOp::sum); },
         [&] { return mine.cpu().to(torch::kDouble).equal(full.slice(0, me * n, (me + 1) * n)); });
    auto b = on_dev(input_of(me, n, dtype));
    time("broadcast", dtype, n, [&] { c_.broadcast(b, p - 1); },
         [&] { return b.cpu().equal(input_of(p - 1, n, dtype)); });
  }

  // Times the collective alone (synchronized, so queued GPU work counts), then verifies it.
  template <class Run, class Verify>
  void time(const char* op, torch::ScalarType dtype, int64_t n, Run&& run, Verify&& verify) {
    auto t0 = Clock::now();
    run();
    c_.synchronize();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    bool ok = verify();
    rows_.push_back({op, c10::toString(dtype), n, ok, ms});
    if (!ok)
      eprintf_rank("selfcheck: %s %s[%lld] on group '%s' differs from the serial reference\n", op,
                   c10::toString(dtype), static_cast<long long>(n), c_.group_name().c_str());
  }

  Collectives& c_;
  torch::Device device_;
  std::vector<Row> rows_;
};

// The actor ranks send rows of different lengths; the other group returns each row's sum.
bool check_exchange(Runtime& rt, Role to, std::vector<Row>* rows) {
  const Group& actor = rt.groups->of(Role::actor);
  const Group& other = rt.groups->of(to);
  GroupExchange ex(rt.world, std::string("actor->") + role_name(to), actor.world_ranks,
                   other.world_ranks, 10 + static_cast<int>(to), rt.device, rt.watchdog.get());
  Batch batch;
  if (actor.member()) {
    int64_t rows_n = 3 + actor.rank, len = 5 + actor.rank;
    auto tokens = torch::arange(rows_n * len, torch::kLong).view({rows_n, len}).add(1000 * actor.rank);
    batch = {tokens.to(rt.device), torch::ones({rows_n, len}, torch::kBool).to(rt.device)};
  }
  auto t0 = Clock::now();
  auto pieces = ex.forward(batch);
  std::vector<Batch> results;
  for (const auto& piece : pieces)
    results.push_back({(piece[0] * piece[1].to(torch::kLong)).sum(1)});
  auto back = ex.backward(results);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  bool ok = true;
  if (actor.member()) {
    ok = back.size() == 1 && back[0].cpu().equal(batch[0].cpu().sum(1));
    rows->push_back({std::string("actor -> ") + role_name(to), "int64", batch[0].numel(), ok, ms});
    if (!ok) eprintf_rank("selfcheck: exchange actor -> %s returned wrong row sums\n", role_name(to));
  }
  return ok;
}

// One line per group and operation: how many (dtype, size) cases matched the reference, and the
// time and bus bandwidth of the largest fp32 case (busbw as nccl-tests defines it).
std::string summarize(const Group& g, const std::vector<Row>& rows) {
  std::ostringstream out;
  std::vector<std::string> ops;
  for (const auto& r : rows)
    if (std::find(ops.begin(), ops.end(), r.op) == ops.end()) ops.push_back(r.op);
  const double n = g.size();
  for (const auto& op : ops) {
    int passed = 0, total = 0;
    const Row* big = nullptr;
    for (const auto& r : rows) {
      if (r.op != op) continue;
      ++total;
      passed += r.ok;
      if (r.dtype == "Float" && (!big || r.numel > big->numel)) big = &r;
    }
    double factor = op.rfind("all_reduce", 0) == 0 ? 2 * (n - 1) / n
                    : op == "broadcast"           ? (n > 1 ? 1.0 : 0.0)
                                                  : (n - 1) / n;
    double bytes = big ? big->numel * 4.0 * (op == "all_reduce sum" || op == "all_reduce avg" ||
                                                     op == "broadcast" ? 1 : n)
                       : 0;
    char line[256];
    std::snprintf(line, sizeof(line), "%-32s %-6s %-5s %-20s %3d/%-3d %10.3f %10.2f\n",
                  g.name.c_str(), rank_list(g.world_ranks).c_str(), g.coll->backend_name(),
                  op.c_str(), passed, total, big ? big->ms : 0.0,
                  big && big->ms > 0 ? bytes / (big->ms * 1e-3) / 1e9 * factor : 0.0);
    out << line;
  }
  return out.str();
}

}  // namespace

int run_selfcheck(Runtime& rt) {
  bool ok = true;
  std::string table;
  const int iterations = rt.config.get<RunConfig>().iterations;
  for (int it = 0; it < iterations; ++it) {
    const bool last = it + 1 == iterations;
    for (const auto& g : rt.groups->all()) {
      if (!g->member()) continue;
      GroupCheck check(*g->coll, rt.device);
      check.run_all();
      for (const auto& r : check.rows()) ok &= r.ok;
      if (last && g->rank == 0) table += summarize(*g, check.rows());
    }
    std::vector<Row> ex_rows;
    for (Role to : {Role::critic, Role::reference, Role::reward})
      if (rt.groups->has(to)) ok &= check_exchange(rt, to, &ex_rows);
    const Group& actor = rt.groups->of(Role::actor);
    if (last && actor.rank == 0)
      for (const auto& r : ex_rows) {
        char line[256];
        std::snprintf(line, sizeof(line), "%-32s %-6s %-5s %-20s %3d/%-3d %10.3f %10s\n",
                      r.op.c_str(), "", "mpi", "exchange + back", r.ok ? 1 : 0, 1, r.ms, "");
        table += line;
      }
  }
  printf0("%-32s %-6s %-5s %-20s %7s %10s %10s\n", "group", "ranks", "via", "operation", "match",
          "ms (fp32)", "busbw GB/s");
  for (const auto& text : gather_text(rt.world.comm(), table)) printf0("%s", text.c_str());
  bool all = rt.world.all_ok(ok);
  printf0("selfcheck %s on all %d ranks (%d iteration%s; each case against a serial reference)\n",
          all ? "passed" : "FAILED", rt.world.size(), iterations, iterations == 1 ? "" : "s");
  return all ? 0 : 1;
}

}  // namespace quartet
