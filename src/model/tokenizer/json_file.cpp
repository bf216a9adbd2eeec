#include "quartet/model/tokenizer/json_file.hpp"

#include <fstream>
#include <sstream>

#include "quartet/core/check.hpp"

namespace quartet {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(__FILE__, __LINE__, path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    fail(__FILE__, __LINE__, path + ": malformed JSON: " + e.what());
  }
}

void JsonFile::refuse_at(const std::string& json_path, const std::string& what) const {
  fail(__FILE__, __LINE__, path + ": " + json_path + " " + what);
}

const json& JsonFile::member(const json& obj, const char* key, const std::string& json_path) const {
  if (!obj.is_object()) refuse_at(json_path, "is not a JSON object");
  auto it = obj.find(key);
  if (it == obj.end()) refuse_at(json_path + "." + key, "is missing");
  return *it;
}

std::string JsonFile::string_at(const json& v, const std::string& json_path) const {
  if (!v.is_string()) refuse_at(json_path, "is not a string");
  return v.get<std::string>();
}

bool JsonFile::flag(const json& obj, const char* key, bool fallback, const std::string& json_path) const {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) refuse_at(json_path + "." + key, "is not true/false");
  return it->get<bool>();
}

int64_t JsonFile::id_at(const json& v, const std::string& json_path) const {
  if (!v.is_number_integer() || v.get<int64_t>() < 0) refuse_at(json_path, "is not a token id");
  return v.get<int64_t>();
}

size_t JsonFile::count_at(const json& v, const std::string& json_path) const {
  if (!v.is_number_integer() || v.get<int64_t>() < 0) refuse_at(json_path, "is not a non-negative integer");
  return static_cast<size_t>(v.get<int64_t>());
}

std::string JsonFile::type_of(const json& obj, const std::string& json_path) const {
  return string_at(member(obj, "type", json_path), json_path + ".type");
}

}  // namespace quartet
