#pragma once
// Reading the JSON files of a model directory (tokenizer.json, tokenizer_config.json,
// config.json for the tokenizer's ids): every refusal is a quartet::Error naming the file and
// the JSON path of what it refuses.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace quartet {

// A file's whole text parsed; one that cannot be opened or is malformed is refused by name.
nlohmann::json read_json(const std::string& path);

// Typed access to the values of the JSON file at `path`.
struct JsonFile {
  using json = nlohmann::json;
  std::string path;

  [[noreturn]] void refuse_at(const std::string& json_path, const std::string& what) const;
  // obj[key], which must exist (obj must be an object).
  const json& member(const json& obj, const char* key, const std::string& json_path) const;
  std::string string_at(const json& v, const std::string& json_path) const;
  // A flag that may be absent or null (then `fallback`, as HF's serde defaults do).
  bool flag(const json& obj, const char* key, bool fallback, const std::string& json_path) const;
  // A non-negative integer, as a token id or as a count.
  int64_t id_at(const json& v, const std::string& json_path) const;
  size_t count_at(const json& v, const std::string& json_path) const;
  // obj["type"], a string.
  std::string type_of(const json& obj, const std::string& json_path) const;
};

}  // namespace quartet
