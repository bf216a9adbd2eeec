#include "quartet/io/h5.hpp"

#include "quartet/core/check.hpp"

namespace quartet::h5 {

Quiet::Quiet() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Quiet::~Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

bool exists(hid_t loc, const std::string& path) {
  // H5Lexists needs every parent to exist: test each prefix in turn.
  for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
    if (H5Lexists(loc, path.substr(0, slash).c_str(), H5P_DEFAULT) <= 0) return false;
  return H5Lexists(loc, path.c_str(), H5P_DEFAULT) > 0;
}

H5 group(hid_t loc, const std::string& path) {
  if (exists(loc, path)) return {H5_CHECK(H5Gopen2(loc, path.c_str(), H5P_DEFAULT)), H5Gclose};
  H5 lcpl{H5_CHECK(H5Pcreate(H5P_LINK_CREATE)), H5Pclose};
  H5_CHECK(H5Pset_create_intermediate_group(lcpl.id, 1));
  return {H5_CHECK(H5Gcreate2(loc, path.c_str(), lcpl.id, H5P_DEFAULT, H5P_DEFAULT)), H5Gclose};
}

std::vector<std::string> link_names(hid_t g) {
  H5G_info_t info{};
  H5_CHECK(H5Gget_info(g, &info));
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len = H5_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT));
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5_CHECK(H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT));
    name.resize(static_cast<size_t>(len));
    names.push_back(std::move(name));
  }
  return names;
}

void string_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5 type{H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose};
  H5_CHECK(H5Tset_size(type.id, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type.id, H5T_CSET_UTF8));
  H5 space{H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose};
  if (H5Aexists(obj, name.c_str()) > 0) H5_CHECK(H5Adelete(obj, name.c_str()));
  H5 attr{H5_CHECK(H5Acreate2(obj, name.c_str(), type.id, space.id, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose};
  const char* p = value.c_str();
  H5_CHECK(H5Awrite(attr.id, type.id, &p));
}

void int_attr(hid_t obj, const std::string& name, std::int64_t value) {
  H5 space{H5_CHECK(H5Screate(H5S_SCALAR)), H5Sclose};
  if (H5Aexists(obj, name.c_str()) > 0) {
    H5 attr{H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)), H5Aclose};
    H5_CHECK(H5Awrite(attr.id, H5T_NATIVE_INT64, &value));
    return;
  }
  H5 attr{H5_CHECK(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.id, H5P_DEFAULT, H5P_DEFAULT)), H5Aclose};
  H5_CHECK(H5Awrite(attr.id, H5T_NATIVE_INT64, &value));
}

bool has_attr(hid_t obj, const std::string& name) { return H5Aexists(obj, name.c_str()) > 0; }

std::string read_string_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return "";
  H5 attr{H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)), H5Aclose};
  H5 type{H5_CHECK(H5Aget_type(attr.id)), H5Tclose};
  if (H5Tget_class(type.id) != H5T_STRING) return "";
  if (H5Tis_variable_str(type.id) > 0) {
    H5 mem{H5_CHECK(H5Tcopy(H5T_C_S1)), H5Tclose};
    H5_CHECK(H5Tset_size(mem.id, H5T_VARIABLE));
    H5_CHECK(H5Tset_cset(mem.id, H5Tget_cset(type.id)));  // HDF5 does not convert between csets
    char* p = nullptr;
    H5_CHECK(H5Aread(attr.id, mem.id, &p));
    std::string out = p ? p : "";
    H5free_memory(p);
    return out;
  }
  std::string out(H5Tget_size(type.id), '\0');
  H5_CHECK(H5Aread(attr.id, type.id, out.data()));
  return out.substr(0, out.find('\0'));
}

std::int64_t read_int_attr(hid_t obj, const std::string& name, std::int64_t fallback) {
  if (H5Aexists(obj, name.c_str()) <= 0) return fallback;
  H5 attr{H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)), H5Aclose};
  std::int64_t v = fallback;
  H5_CHECK(H5Aread(attr.id, H5T_NATIVE_INT64, &v));
  return v;
}

namespace {
herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (n > 0) *text += "; ";
  *text += std::string(err->func_name ? err->func_name : "?") + ": " + (err->desc ? err->desc : "?");
  return 0;
}
}  // namespace

std::string error_stack() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &text);
  return text.empty() ? "no HDF5 error stack" : text;
}

void failed_at(const std::string& context, long long code, const char* call, const char* file, int line) {
  fail(file, line, context + ": HDF5 error " + std::to_string(code) + " in " + call + ": " + error_stack());
}

}  // namespace quartet::h5
