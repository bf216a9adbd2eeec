#pragma once
// Text from every rank of a communicator to one rank: reports and result lines that rank 0
// prints or writes for the whole job.
#include <mpi.h>

#include <string>
#include <vector>

namespace quartet {

// On `root`: every rank's text in rank order; elsewhere: empty. Collective over `comm`.
std::vector<std::string> gather_text(MPI_Comm comm, const std::string& mine, int root = 0);

}  // namespace quartet
