#pragma once
// The deck's [dist] section: devices, collectives and the watchdog.
#include <cstdint>

#include "quartet/core/settings.hpp"

namespace quartet {

enum class Backend { automatic, nccl, mpi };    // dist.backend: auto | nccl | mpi
enum class DeviceKind { automatic, cuda, cpu };  // dist.device: auto | cuda | cpu
const char* name_of(Backend value);
const char* name_of(DeviceKind value);

struct DistConfig {  // [dist]
  Backend backend = Backend::automatic;
  DeviceKind device = DeviceKind::automatic;
  double watchdog_timeout = 600;  // seconds a collective or exchange may take before abort
  // Seconds MPI's start-up (MPI_Init and the world's first collectives, before any watchdog)
  // may take before a rank gives up on the others (dist/startup_deadline.hpp).
  double startup_timeout = 600;
  // Memory of one device in bytes, for the memory plan; 0 = ask the device (GPU) or the host
  // (CPU runs: physical memory shared by the ranks of the node). Deck: "auto" or e.g. "80GiB".
  std::uint64_t device_memory = 0;
};

const Section<DistConfig>& dist_section();

}  // namespace quartet
