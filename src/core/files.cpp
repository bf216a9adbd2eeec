#include "quartet/core/files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "quartet/core/check.hpp"

namespace quartet {
namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void make_directories(const std::string& dir) {
  for (std::size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string part = dir.substr(0, i);
    QUARTET_CHECK(::mkdir(part.c_str(), 0755) == 0 || errno == EEXIST,
                  "cannot create directory " + part + ": " + errno_text());
  }
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    QUARTET_CHECK(n > 0, "cannot write " + path + ": " + errno_text());
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void write_file_atomically(const std::string& path, const std::function<void(int fd)>& fill) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QUARTET_CHECK(fd >= 0, "cannot create " + tmp + ": " + errno_text());
  try {
    fill(fd);
    QUARTET_CHECK(::fsync(fd) == 0, "cannot fsync " + tmp + ": " + errno_text());
    int rc = ::close(fd);
    fd = -1;
    QUARTET_CHECK(rc == 0, "cannot close " + tmp + ": " + errno_text());
    QUARTET_CHECK(::rename(tmp.c_str(), path.c_str()) == 0,
                  "cannot rename " + tmp + " to " + path + ": " + errno_text());
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename itself is durable only once the directory is synced; failing that is harmless.
  const std::size_t slash = path.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_text_atomically(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&](int fd) { write_all(fd, text.data(), text.size(), path); });
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QUARTET_CHECK(fd >= 0, "cannot open " + path + ": " + errno_text());
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errno_text();
      ::close(fd);
      fail(__FILE__, __LINE__, "cannot read " + path + ": " + why);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::vector<std::string> list_directory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  QUARTET_CHECK(d != nullptr, "cannot list directory " + dir + ": " + errno_text());
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
    errno = 0;
  }
  const int err = errno;  // readdir returns nullptr both at the end and on failure
  ::closedir(d);
  QUARTET_CHECK(err == 0, "cannot list directory " + dir + ": " + std::strerror(err));
  std::sort(names.begin(), names.end());
  return names;
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    QUARTET_CHECK(errno == ENOENT, "cannot remove " + path + ": " + errno_text());
    return;
  }
  // lstat, not stat: a symlink to a directory is removed as a link, never followed.
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : list_directory(path)) remove_tree(path + "/" + name);
    QUARTET_CHECK(::rmdir(path.c_str()) == 0 || errno == ENOENT, "cannot remove directory " + path + ": " + errno_text());
  } else {
    QUARTET_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, "cannot remove " + path + ": " + errno_text());
  }
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  QUARTET_CHECK(fd >= 0, "cannot open directory " + dir + " to sync it: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc == 0 ? "" : errno_text();
  ::close(fd);
  QUARTET_CHECK(rc == 0, "cannot fsync directory " + dir + ": " + why);
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string base_name(const std::string& path) {
  const std::string p = strip_trailing_slashes(path);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string parent_directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string move_aside(const std::string& path, const std::string& suffix) {
  std::string to = path + suffix;
  for (int n = 2; path_exists(to); ++n) to = path + suffix + "." + std::to_string(n);
  // A name taken between the check and the rename would be replaced: only a second run
  // writing into the same directory at the same moment could do that.
  QUARTET_CHECK(::rename(path.c_str(), to.c_str()) == 0, "cannot move " + path + " to " + to + ": " + errno_text());
  return to;
}

}  // namespace quartet
