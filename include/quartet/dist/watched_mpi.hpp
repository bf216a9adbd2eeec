#pragma once
// Blocking MPI collectives under the watchdog (dist/watchdog.hpp). Every collective quartet
// makes outside the group backends goes through these, on any communicator, so a rank that
// stalls anywhere becomes a report naming the operation, the communicator and the ranks waited
// for, and an aborted job, instead of a hang. They watch with the process's watchdog
// (Watchdog::process()); where there is none (MPI start-up, tools) they are plain MPI calls.
//
// Each call is numbered per communicator ("allreduce #12 (the iteration's metrics) on world
// (world ranks 0-3)"): every member makes the same collectives in the same order, so the same
// number names the same operation on every rank, which is how a roll call tells who arrived.
// `why` says what the collective is for. Errors are quartet::Error naming the call.
#include <mpi.h>

#include <string>
#include <vector>

#include "quartet/dist/watchdog.hpp"

namespace quartet {

// How reports name `comm` ("group 'actor'"); MPI_COMM_WORLD is "world" without being named.
void name_communicator(MPI_Comm comm, const std::string& name);
// The world ranks of `comm`'s members, in comm rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

namespace watched {

// `in` may be MPI_IN_PLACE.
void allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
               const std::string& why);
void bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, const std::string& why);
void barrier(MPI_Comm comm, const std::string& why);
void gather(const void* in, int count, MPI_Datatype type, void* out, int root, MPI_Comm comm,
            const std::string& why);
void gatherv(const void* in, int count, MPI_Datatype type, void* out, const int* counts, const int* offsets,
             int root, MPI_Comm comm, const std::string& why);
void allgather(const void* in, int count, MPI_Datatype type, void* out, MPI_Comm comm, const std::string& why);
// `text` from `root` to every rank: its length, then its bytes (up to 2 GiB).
void bcast_text(std::string* text, int root, MPI_Comm comm, const std::string& why);
// MPI_Comm_split, named `name` for the reports when this rank is in it.
MPI_Comm split(MPI_Comm comm, int color, int key, const std::string& name);

// Collective work that is not one MPI call (parallel HDF5: a collective open, write or close),
// watched as one numbered operation on `comm` for as long as the returned watch lives.
Watchdog::Watch scope(MPI_Comm comm, const std::string& why);

}  // namespace watched
}  // namespace quartet
