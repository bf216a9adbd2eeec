#include "quartet/dist/gather_text.hpp"

#include <climits>

#include "quartet/core/check.hpp"
#include "quartet/dist/watched_mpi.hpp"

namespace quartet {

std::vector<std::string> gather_text(MPI_Comm comm, const std::string& mine, int root) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  QUARTET_CHECK(mine.size() < INT_MAX, "gather_text: more than 2 GiB of text from one rank");
  int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<size_t>(size)), offsets(sizes.size());
  watched::gather(&n, 1, MPI_INT, sizes.data(), root, comm, "the sizes of the ranks' texts");
  long long total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = static_cast<int>(total);
    total += sizes[i];
  }
  QUARTET_CHECK(rank != root || total < INT_MAX, "gather_text: more than 2 GiB of text in all");
  std::string all(rank == root ? static_cast<size_t>(total) : 0, '\0');
  watched::gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), offsets.data(), root, comm,
                   "the ranks' texts");
  std::vector<std::string> out;
  if (rank == root)
    for (size_t i = 0; i < sizes.size(); ++i) out.push_back(all.substr(static_cast<size_t>(offsets[i]), static_cast<size_t>(sizes[i])));
  return out;
}

}  // namespace quartet
