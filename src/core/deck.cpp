#include "quartet/core/deck.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

namespace po = boost::program_options;

namespace quartet {
namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::string section_of(const std::string& key) {
  auto dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

// The keys of one section, for "did you mean" help in unknown-key errors.
std::string keys_of_section(const po::options_description& schema, const std::string& section) {
  std::string out;
  for (const auto& opt : schema.options()) {
    const std::string& k = opt->long_name();
    if (section_of(k) != section) continue;
    if (!out.empty()) out += ", ";
    out += k.substr(section.size() + (section.empty() ? 0 : 1));
  }
  return out;
}

std::string expected_type(const po::option_description& opt) {
  const po::value_semantic* s = opt.semantic().get();
  if (dynamic_cast<const po::typed_value<int>*>(s)) return "an integer";
  if (dynamic_cast<const po::typed_value<long>*>(s)) return "an integer";
  if (dynamic_cast<const po::typed_value<std::uint64_t>*>(s)) return "a non-negative integer";
  if (dynamic_cast<const po::typed_value<double>*>(s)) return "a number";
  if (dynamic_cast<const po::typed_value<bool>*>(s)) return "true or false";
  return "a value of the key's type";
}

std::string any_to_string(const boost::any& v) {
  if (v.empty()) return "";
  if (auto p = boost::any_cast<int>(&v)) return std::to_string(*p);
  if (auto p = boost::any_cast<long>(&v)) return std::to_string(*p);
  if (auto p = boost::any_cast<std::uint64_t>(&v)) return std::to_string(*p);
  if (auto p = boost::any_cast<bool>(&v)) return *p ? "true" : "false";
  if (auto p = boost::any_cast<std::string>(&v)) return *p;
  if (auto p = boost::any_cast<double>(&v)) {
    std::ostringstream s;
    s << *p;
    return s.str();
  }
  return "?";
}

}  // namespace

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    item = trim(item);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string read_deck_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw DeckError("cannot read deck '" + path + "': it is a directory (give the deck file, e.g. " + path +
                    "/train.deck)");
  std::ifstream in(path);
  if (!in) throw DeckError("cannot read deck '" + path + "': no such file or not readable");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Deck Deck::from_file(const std::string& path, const std::vector<std::string>& overrides,
                     const po::options_description& schema) {
  return Deck(path, read_deck_file(path), overrides, schema);
}

Deck::Deck(std::string name, std::string text, const std::vector<std::string>& overrides,
           const po::options_description& schema)
    : name_(std::move(name)), text_(std::move(text)) {
  // 1. Our own pass over the text: syntax, unknown and repeated keys, with line numbers
  //    (Boost reports neither the line nor, for config files, a helpful message).
  std::istringstream lines(text_);
  std::string raw, section;
  std::set<std::string> sections;
  for (const auto& opt : schema.options()) sections.insert(section_of(opt->long_name()));
  for (int lineno = 1; std::getline(lines, raw); ++lineno) {
    std::string line = trim(raw.substr(0, raw.find('#')));
    auto here = name_ + ":" + std::to_string(lineno);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3)
        throw DeckError(here + ": malformed section header '" + line + "' (expected [name])");
      section = trim(line.substr(1, line.size() - 2));
      if (!sections.count(section))
        throw DeckError(here + ": unknown section [" + section + "]");
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos || trim(line.substr(0, eq)).empty())
      throw DeckError(here + ": expected 'key = value' or '[section]', found '" + line + "'");
    std::string key = trim(line.substr(0, eq));
    std::string full = section.empty() ? key : section + "." + key;
    if (section.empty())
      throw DeckError(here + ": key '" + key + "' stands before any [section] header");
    if (!schema.find_nothrow(full, false)) {
      std::string known = keys_of_section(schema, section);
      throw DeckError(here + ": unknown key '" + key + "' in section [" + section + "]" +
                      (known.empty() ? "" : " (known keys: " + known + ")"));
    }
    if (line_of_.count(full))
      throw DeckError(here + ": key '" + full + "' is set twice (first on line " +
                      std::to_string(line_of_[full]) + ")");
    if (trim(line.substr(eq + 1)).empty())
      throw DeckError(here + ": key '" + full + "' has an empty value");
    line_of_[full] = lineno;
  }

  // 2. Overrides: "section.key=value", each a known key.
  std::string override_text;
  for (const auto& o : overrides) {
    auto eq = o.find('=');
    std::string key = trim(o.substr(0, eq));
    if (eq == std::string::npos || key.find('.') == std::string::npos)
      throw DeckError("--set " + o + ": expected section.key=value");
    if (!schema.find_nothrow(key, false))
      throw DeckError("--set " + o + ": unknown key '" + key + "'");
    if (override_of_.count(key)) throw DeckError("--set " + o + ": key '" + key + "' set twice");
    override_of_[key] = o;
    auto sec = section_of(key);
    override_text += "[" + sec + "]\n" + key.substr(sec.size() + 1) + "=" + o.substr(eq + 1) + "\n";
  }

  // 3. Boost does the typed parsing. Overrides are stored first: the first stored value wins.
  auto store = [&](const std::string& src) {
    std::istringstream in(src);
    try {
      po::store(po::parse_config_file(in, schema, false), values_);
    } catch (const po::error_with_option_name& e) {
      std::string key = e.get_option_name();
      while (!key.empty() && key.front() == '-') key.erase(0, 1);
      const auto* opt = schema.find_nothrow(key, false);
      fail(key, std::string("has a bad value: expected ") +
                    (opt ? expected_type(*opt) : std::string("another value")) + " (" +
                    e.what() + ")");
    } catch (const po::error& e) {
      throw DeckError(name_ + ": " + e.what());
    }
  };
  store(override_text);
  store(text_);
  po::notify(values_);
  for (const auto& opt : schema.options()) key_order_.push_back(opt->long_name());
  // Numbers are finite: inf or nan would slip through every range check written as a
  // comparison (nan >= 0 is false, but inf >= 0 is true) and reach the run.
  for (const auto& [key, value] : values_) {
    const double* number = boost::any_cast<double>(&value.value());
    if (number && !std::isfinite(*number)) fail(key, "is " + any_to_string(value.value()) + ": expected a finite number");
  }
}

bool Deck::given(const std::string& key) const {
  auto it = values_.find(key);
  return it != values_.end() && !it->second.defaulted();
}

std::string Deck::where(const std::string& key) const {
  if (auto o = override_of_.find(key); o != override_of_.end()) return "--set " + o->second;
  if (auto l = line_of_.find(key); l != line_of_.end())
    return name_ + ":" + std::to_string(l->second);
  return name_ + " (default)";
}

void Deck::fail(const std::string& key, const std::string& message) const {
  throw DeckError(where(key) + ": " + key + " " + message);
}

std::string Deck::value_text(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() || it->second.empty() ? "" : any_to_string(it->second.value());
}

std::string Deck::resolved() const {
  std::ostringstream out;
  std::string section = "\x01";
  for (const auto& key : key_order_) {
    auto sec = section_of(key);
    if (sec != section) {
      out << (section == "\x01" ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    std::string name = key.substr(sec.size() + (sec.empty() ? 0 : 1));
    std::string value = value_text(key);
    if (value.empty())
      out << "# " << name << " (not set)\n";
    else
      out << name << " = " << value << "\n";
  }
  return out.str();
}

}  // namespace quartet
