#pragma once
// File-system helpers on plain POSIX calls. Not std::filesystem: libtorch.so exports its own
// copies of std::filesystem's free functions (remove_all, create_directories, ...), which the
// dynamic linker may bind in place of libstdc++'s; remove_all was seen to crash that way.
#include <functional>
#include <string>
#include <vector>

namespace quartet {

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
// mkdir -p; throws quartet::Error naming the part that could not be made.
void make_directories(const std::string& dir);
// Writes `fill(fd)`'s output to path.tmp, fsyncs it and renames it into place, so the real name
// only ever holds a complete file; on any failure the temporary is removed and the error rethrown.
void write_file_atomically(const std::string& path, const std::function<void(int fd)>& fill);
// The same for a string's bytes.
void write_text_atomically(const std::string& path, const std::string& text);
// write(2) until every byte is out; throws naming `path` on failure.
void write_all(int fd, const void* data, std::size_t bytes, const std::string& path);
// A whole file's bytes; throws naming `path` when it cannot be opened or read.
std::string read_file(const std::string& path);
// The names in a directory, without "." and "..", sorted; throws naming `dir` on failure.
std::vector<std::string> list_directory(const std::string& dir);
// rm -rf: removes a file, a symlink (not what it points to) or a directory and everything in it.
// Nothing there is not an error; anything that cannot be removed throws naming that entry.
void remove_tree(const std::string& path);
// fsync(2) on a directory, so that entries created, renamed or removed in it are durable.
void fsync_directory(const std::string& dir);
// Renames `path` to path + suffix, or, when that is taken, path + suffix + ".2", ".3", ...;
// returns the new name. Nothing already there is replaced.
std::string move_aside(const std::string& path, const std::string& suffix);

// Path text, no file system access: "a/b//" -> "a/b" (but "/" stays "/"); the last component
// ("a/b/" -> "b"); the directory part ("a/b" -> "a", "b" -> ".", "/b" -> "/").
std::string strip_trailing_slashes(std::string path);
std::string base_name(const std::string& path);
std::string parent_directory(const std::string& path);
}  // namespace quartet
