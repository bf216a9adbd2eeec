#include "quartet/dist/dist_config.hpp"

#include "quartet/core/units.hpp"

namespace quartet {

namespace {

constexpr Choice<Backend> kBackends[] = {{"auto", Backend::automatic}, {"nccl", Backend::nccl}, {"mpi", Backend::mpi}};
constexpr Choice<DeviceKind> kDevices[] = {{"auto", DeviceKind::automatic}, {"cuda", DeviceKind::cuda}, {"cpu", DeviceKind::cpu}};

void check_backend(const Deck& deck, DistConfig& d) {
  if (d.backend == Backend::nccl && d.device == DeviceKind::cpu)
    deck.fail("dist.backend", "is nccl, which needs GPUs, but dist.device is cpu");
}

}  // namespace

const char* name_of(Backend value) { return choice_name(value, kBackends); }
const char* name_of(DeviceKind value) { return choice_name(value, kDevices); }

const Section<DistConfig>& dist_section() {
  using D = DistConfig;
  static const Section<D> section("dist", "Devices and collectives", {
      choice("backend", &D::backend, kBackends, "collectives inside a group: auto (nccl on GPUs, else mpi) | nccl | mpi"),
      choice("device", &D::device, kDevices, "auto (a GPU when there is one) | cuda | cpu"),
      key("watchdog_timeout", &D::watchdog_timeout, above(0.0, "seconds"), "seconds a collective or exchange may stall before the job is aborted (> 0)"),
      key("startup_timeout", &D::startup_timeout, above(0.0, "seconds"), "seconds MPI's start-up may take (a rank that never starts, or stops, ends the job after it) (> 0)"),
      parsed<D, std::uint64_t>("device_memory", &D::device_memory, "auto", parse_bytes, "memory of one device for the plan: auto (ask the device) or bytes, e.g. 80GiB"),
  }, check_backend);
  return section;
}

}  // namespace quartet
