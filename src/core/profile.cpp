#include "quartet/core/profile.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "quartet/core/check.hpp"

namespace quartet {

namespace {

namespace prof = torch::autograd::profiler;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Kernel names grouped into what bounds them; the names are cuBLAS/CUTLASS's, PyTorch's and
// NCCL's own.
std::string kind_of(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("nccl")) return "communication (NCCL)";
  if (has("Memcpy") || has("Memset") || has("memcpy") || has("memset")) return "copies";
  if (has("fmha") || has("flash") || has("attention") || has("Attention") || has("attend")) return "attention kernels";
  if (has("gemm") || has("Gemm") || has("GEMM") || has("cutlass") || has("xmma") || has("nvjet") || has("sm90_") ||
      has("sm100_") || has("cublas"))
    return "matrix multiplies";
  if (has("reduce") || has("Reduce") || has("softmax") || has("Softmax") || has("norm")) return "reductions, softmax, norms";
  return "elementwise and other";
}

std::string shorten(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n - 3) + "...";
  for (auto& c : s)
    if (c == '|') c = '/';
  return s;
}

}  // namespace

void KernelProfile::start() {
  QUARTET_CHECK(!running_, "KernelProfile: already running");
  const prof::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  // Without the host: device activity only. Recording every host operator slows the host
  // several times over, which makes a phase near the line look host-bound when it is not.
  std::set<torch::profiler::impl::ActivityType> activities;
  if (host_) activities.insert(torch::profiler::impl::ActivityType::CPU);
  if (torch::cuda::is_available()) activities.insert(torch::profiler::impl::ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  running_ = true;
  wall_start_ = now();
}

std::string KernelProfile::stop(const std::string& title, const std::string& trace_path, int top) {
  QUARTET_CHECK(running_, "KernelProfile: not running");
  auto result = prof::disableProfiler();
  const double wall = now() - wall_start_;
  running_ = false;
  if (!trace_path.empty()) result->save(trace_path);

  struct Total {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, Total> by_name, by_kind;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  double kernel_s = 0;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    const double s = static_cast<double>(e.durationNs()) * 1e-9;
    const std::string name = e.name();
    by_name[name].seconds += s;
    by_name[name].calls += 1;
    by_kind[kind_of(name)].seconds += s;
    by_kind[kind_of(name)].calls += 1;
    kernel_s += s;
    spans.emplace_back(e.startNs(), e.endNs());
  }
  // Busy = the union of the kernels' intervals (streams may overlap).
  std::sort(spans.begin(), spans.end());
  double busy = 0;
  uint64_t cur_begin = 0, cur_end = 0;
  for (const auto& [b, e] : spans) {
    if (b > cur_end) {
      busy += static_cast<double>(cur_end - cur_begin) * 1e-9;
      cur_begin = b;
      cur_end = e;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  busy += static_cast<double>(cur_end - cur_begin) * 1e-9;

  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "profile %s: wall %.1f ms, device busy %.1f ms (%.0f%%), %zu device activities\n",
                title.c_str(), wall * 1e3, busy * 1e3, wall > 0 ? 100.0 * busy / wall : 0.0, spans.size());
  out += line;
  std::vector<std::pair<std::string, Total>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  out += "  | kind | calls | ms | share of kernel time |\n  |---|---:|---:|---:|\n";
  for (const auto& [k, t] : kinds) {
    std::snprintf(line, sizeof line, "  | %s | %lld | %.1f | %.0f%% |\n", k.c_str(), (long long)t.calls, t.seconds * 1e3,
                  kernel_s > 0 ? 100.0 * t.seconds / kernel_s : 0.0);
    out += line;
  }
  std::vector<std::pair<std::string, Total>> names(by_name.begin(), by_name.end());
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  out += "  | kernel | calls | ms | mean us |\n  |---|---:|---:|---:|\n";
  for (size_t i = 0; i < names.size() && static_cast<int>(i) < top; ++i) {
    const auto& [n, t] = names[i];
    std::snprintf(line, sizeof line, "  | %s | %lld | %.1f | %.1f |\n", shorten(n, 90).c_str(), (long long)t.calls,
                  t.seconds * 1e3, t.calls ? t.seconds * 1e6 / static_cast<double>(t.calls) : 0.0);
    out += line;
  }
  return out;
}

}  // namespace quartet
