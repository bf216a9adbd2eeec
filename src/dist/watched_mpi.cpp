#include "quartet/dist/watched_mpi.hpp"

#include <climits>
#include <cstring>

#include "quartet/core/check.hpp"
#include "quartet/dist/placement.hpp"
#include "quartet/dist/rank_local.hpp"

namespace quartet {

namespace {

// What reports say about a communicator, cached on it as an MPI attribute. Not copied by
// MPI_Comm_dup: a duplicate starts its own numbering, the same on all of its members.
struct CommInfo {
  std::string name;
  std::vector<int> world_ranks;
  std::string ranks_text;
  long sequence = 0;
};

int delete_info(MPI_Comm, int, void* attribute, void*) {
  delete static_cast<CommInfo*>(attribute);
  return MPI_SUCCESS;
}

int info_key() {
  static const int key = [] {
    int k = MPI_KEYVAL_INVALID;
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_info, &k, nullptr));
    return k;
  }();
  return key;
}

std::vector<int> translate_to_world(MPI_Comm comm) {
  MPI_Group mine, world;
  MPI_CHECK(MPI_Comm_group(comm, &mine));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  int n = 0;
  MPI_CHECK(MPI_Group_size(mine, &n));
  std::vector<int> local(static_cast<size_t>(n)), global(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<size_t>(i)] = i;
  MPI_CHECK(MPI_Group_translate_ranks(mine, n, local.data(), world, global.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return global;
}

CommInfo& info_of(MPI_Comm comm) {
  void* found = nullptr;
  int flag = 0;
  MPI_CHECK(MPI_Comm_get_attr(comm, info_key(), &found, &flag));
  if (flag) return *static_cast<CommInfo*>(found);
  auto* info = new CommInfo;
  if (comm == MPI_COMM_WORLD) {
    info->name = "world";
  } else {
    char name[MPI_MAX_OBJECT_NAME] = {0};
    int len = 0;
    MPI_CHECK(MPI_Comm_get_name(comm, name, &len));
    info->name = len > 0 ? std::string(name, static_cast<size_t>(len)) : "a communicator";
  }
  info->world_ranks = translate_to_world(comm);
  info->ranks_text = rank_list(info->world_ranks);
  MPI_CHECK(MPI_Comm_set_attr(comm, info_key(), info));
  return *info;
}

// The numbered description, and a watch over it when the process has a watchdog.
struct Watched {
  std::string what;
  Watchdog::Watch watch;
};

Watched begin(MPI_Comm comm, const char* op, const std::string& why) {
  CommInfo& info = info_of(comm);
  Watched w;
  w.what = std::string(op) + " #" + std::to_string(++info.sequence) + (why.empty() ? "" : " (" + why + ")") + " on " +
           info.name + " (world ranks " + info.ranks_text + ")";
  check_not_rank_local(w.what);
  if (Watchdog* dog = Watchdog::process()) w.watch = dog->watch(w.what, info.world_ranks);
  return w;
}

void check(int rc, const char* call, const Watched& w) {
  if (rc == MPI_SUCCESS) return;
  const std::string named = std::string(call) + " (" + w.what + ")";
  mpi_failed(rc, named.c_str(), __FILE__, __LINE__);
}

}  // namespace

void name_communicator(MPI_Comm comm, const std::string& name) {
  MPI_CHECK(MPI_Comm_set_name(comm, name.c_str()));
  info_of(comm).name = name;
}

std::vector<int> world_ranks_of(MPI_Comm comm) { return info_of(comm).world_ranks; }

namespace watched {

void allreduce(const void* in, void* out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
               const std::string& why) {
  Watched w = begin(comm, "allreduce", why);
  check(MPI_Allreduce(in, out, count, type, op, comm), "MPI_Allreduce", w);
}

void bcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, const std::string& why) {
  Watched w = begin(comm, "broadcast", why);
  check(MPI_Bcast(buffer, count, type, root, comm), "MPI_Bcast", w);
}

void barrier(MPI_Comm comm, const std::string& why) {
  Watched w = begin(comm, "barrier", why);
  check(MPI_Barrier(comm), "MPI_Barrier", w);
}

void gather(const void* in, int count, MPI_Datatype type, void* out, int root, MPI_Comm comm,
            const std::string& why) {
  Watched w = begin(comm, "gather", why);
  check(MPI_Gather(in, count, type, out, count, type, root, comm), "MPI_Gather", w);
}

void gatherv(const void* in, int count, MPI_Datatype type, void* out, const int* counts, const int* offsets,
             int root, MPI_Comm comm, const std::string& why) {
  Watched w = begin(comm, "gather", why);
  check(MPI_Gatherv(in, count, type, out, counts, offsets, type, root, comm), "MPI_Gatherv", w);
}

void allgather(const void* in, int count, MPI_Datatype type, void* out, MPI_Comm comm, const std::string& why) {
  Watched w = begin(comm, "allgather", why);
  check(MPI_Allgather(in, count, type, out, count, type, comm), "MPI_Allgather", w);
}

void bcast_text(std::string* text, int root, MPI_Comm comm, const std::string& why) {
  long long n = static_cast<long long>(text->size());
  bcast(&n, 1, MPI_LONG_LONG, root, comm, why + ": its length");
  QUARTET_CHECK(n < INT_MAX, why + ": " + std::to_string(n) + " bytes are too many for one broadcast");
  text->resize(static_cast<size_t>(n));
  if (n > 0) bcast(text->data(), static_cast<int>(n), MPI_CHAR, root, comm, why);
}

MPI_Comm split(MPI_Comm comm, int color, int key, const std::string& name) {
  MPI_Comm out = MPI_COMM_NULL;
  {
    Watched w = begin(comm, "split", "the communicator of " + name);
    check(MPI_Comm_split(comm, color, key, &out), "MPI_Comm_split", w);
  }
  if (out != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
    name_communicator(out, name);
  }
  return out;
}

Watchdog::Watch scope(MPI_Comm comm, const std::string& why) {
  return begin(comm, "collective I/O", why).watch;
}

}  // namespace watched
}  // namespace quartet
