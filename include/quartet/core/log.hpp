#pragma once
// Rank-aware output, in the spirit of llm.c's printf0: rank 0 speaks for the job, any rank may
// report a problem under its own name. The world sets the identity once MPI is up.
#include <string>

namespace quartet {

void set_log_identity(int rank, int world_size, const std::string& host);
int log_rank();        // -1 before the world is up
const std::string& log_host();

// printf on rank 0 only (and before the world is up), flushed at once.
void printf0(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// printf to stderr from any rank, prefixed "[rank R host] ", flushed at once.
void eprintf_rank(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace quartet
