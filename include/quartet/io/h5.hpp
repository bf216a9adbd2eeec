#pragma once
// Small helpers over the HDF5 C API shared by the run file and the checkpoint's sharded tensor
// files: an owning handle, paths that may not exist yet, root/object attributes, and errors
// that name the file and object concerned.
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace quartet::h5 {

// Closes an HDF5 handle when it goes out of scope, so an error midway leaks nothing.
struct H5 {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H5() = default;
  H5(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  H5(H5&& o) noexcept : id(o.id), close(o.close) { o.id = -1; }
  H5& operator=(H5&& o) noexcept {
    if (this != &o) {
      reset();
      id = o.id;
      close = o.close;
      o.id = -1;
    }
    return *this;
  }
  ~H5() { reset(); }
  void reset() {
    if (id >= 0 && close) close(id);
    id = -1;
  }
};

// While one is alive, HDF5 prints no error stacks of its own (the calling thread's default
// stack): for calls whose failure is expected and reported as a quartet::Error with the file's
// name (a damaged file, a missing dataset). The error stack is still there for H5_CHECK_AT.
class Quiet {
 public:
  Quiet();
  ~Quiet();
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Whether every link along `path` ("a/b/c", relative to loc) exists (H5Lexists alone fails
// when a parent is missing).
bool exists(hid_t loc, const std::string& path);
// Opens the group at `path`, creating it and any missing parents.
H5 group(hid_t loc, const std::string& path);
// The names of the links in group `g` (datasets, groups, ...), in name order.
std::vector<std::string> link_names(hid_t g);

// Attributes on an object (file root, group, dataset); writing replaces an existing one.
// Strings are variable-length UTF-8 (h5py reads them as str).
void string_attr(hid_t obj, const std::string& name, const std::string& value);
void int_attr(hid_t obj, const std::string& name, std::int64_t value);
bool has_attr(hid_t obj, const std::string& name);
// "" when missing or not a string.
std::string read_string_attr(hid_t obj, const std::string& name);
// `fallback` when missing.
std::int64_t read_int_attr(hid_t obj, const std::string& name, std::int64_t fallback);

// The HDF5 error stack of the calling thread as one line ("func: desc; func: desc").
std::string error_stack();
[[noreturn]] void failed_at(const std::string& context, long long code, const char* call, const char* file,
                            int line);

}  // namespace quartet::h5

// H5_CHECK with a context leading the message: "<file>, dataset <name>: HDF5 error ...".
#define H5_CHECK_AT(context, call)                                                                  \
  ([&]() {                                                                                          \
    auto quartet_rc_ = (call);                                                                      \
    if (quartet_rc_ < 0)                                                                            \
      ::quartet::h5::failed_at((context), static_cast<long long>(quartet_rc_), #call, __FILE__, __LINE__); \
    return quartet_rc_;                                                                             \
  }())
