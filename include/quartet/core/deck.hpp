#pragma once
// An input deck: INI text as Boost.ProgramOptions config files read it ("[section]" headers,
// "key = value" lines, '#' comments), plus `--set section.key=value` overrides from the command
// line. The deck remembers where each key came from so that every error names the file and the
// line (or the --set argument) of the key it is about.
#include <boost/any.hpp>
#include <boost/program_options.hpp>
#include <map>
#include <string>
#include <vector>

#include "quartet/core/check.hpp"

namespace quartet {

// A problem with the deck: the message already names file, line and key.
class DeckError : public Error {
 public:
  using Error::Error;
};

class Deck {
 public:
  // `name` is what errors call the text (the file's path); `schema` lists every accepted key
  // as "section.key". Throws DeckError for syntax errors, unknown keys, repeated keys, values
  // of the wrong type and malformed overrides.
  Deck(std::string name, std::string text, const std::vector<std::string>& overrides,
       const boost::program_options::options_description& schema);
  // Reads the file first; an unreadable file is a DeckError naming it.
  static Deck from_file(const std::string& path, const std::vector<std::string>& overrides,
                        const boost::program_options::options_description& schema);

  template <class T>
  T get(const std::string& key) const {
    auto it = values_.find(key);
    if (it == values_.end() || it->second.empty()) fail(key, "has no value and no default");
    try {
      return it->second.as<T>();
    } catch (const boost::bad_any_cast&) {
      fail(key, "is read with the wrong type (a bug in quartet's config code)");
    }
  }
  // True when the deck or an override set the key (not just its default).
  bool given(const std::string& key) const;
  // "demo.deck:12", "--set placement.actor=3", or "default" for a key nobody set.
  std::string where(const std::string& key) const;
  // Throws DeckError "<where>: <key> <message>".
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  const std::string& name() const { return name_; }
  const std::string& text() const { return text_; }
  // The key's final value as the deck would spell it; "" when it has none.
  std::string value_text(const std::string& key) const;
  // Every key of the schema with its final value, as a deck (sections in schema order).
  std::string resolved() const;

 private:
  std::string name_;
  std::string text_;
  std::map<std::string, int> line_of_;               // key -> line in the deck text
  std::map<std::string, std::string> override_of_;   // key -> the --set argument
  boost::program_options::variables_map values_;
  std::vector<std::string> key_order_;
};

// The whole file; a missing or unreadable file is a DeckError naming it.
std::string read_deck_file(const std::string& path);

// "a, b ,c" -> {"a","b","c"}; used by list-valued keys.
std::vector<std::string> split_list(const std::string& text);

}  // namespace quartet
