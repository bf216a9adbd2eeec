#pragma once
// Settings declared once. A deck section is a struct of typed members, whose initialisers are the
// defaults, and a table of rows beside the code that reads it, one row a key: its name, the member
// it fills, its check and its help text.
//
//   const Section<RolloutConfig>& rollout_section() {
//     static const Section<RolloutConfig> section("rollout", "Prompts and sampling", {
//         key("batch", &RolloutConfig::batch, at_least(1), "prompts per generation batch and rank"),
//         choice("mode", &RolloutConfig::mode, kModes, "..."),
//     });
//     return section;
//   }
//
// From the rows come the deck's schema (the keys a deck may hold, their types and defaults), the
// lines of --help, the resolved deck that run.h5 records, and the typed, checked struct. A check
// that spans several keys, or a member derived from others, is the section's `finish`. The
// sections of every area are listed once, at the top (commands/deck_sections.hpp), and loaded
// into a Config (core/config.hpp) before any rank starts work.
#include <boost/program_options/options_description.hpp>
#include <boost/program_options/value_semantic.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"

namespace quartet {

// What is wrong with a value, as "<key> <message>" reads ("must be at least 1"); "" when nothing.
template <class T>
using Check = std::function<std::string(const T&)>;

// The common checks; `note` follows the message ("must be >= 0 (0: no profile)").
Check<int> at_least(int min, const std::string& note = "");         // must be at least N (N = 0: >= 0)
Check<double> above(double min, const std::string& note = "");      // must be > x
Check<double> at_least(double min, const std::string& note = "");   // must be >= x
Check<double> within(double low, double high);                      // must be in [low, high]
Check<std::string> not_empty();                   // must not be empty
Check<std::string> readable_file_or_empty(const std::string& verb = "is");  // "" or a readable file
Check<std::vector<std::string>> readable_files(const std::string& verb = "names");  // each a readable file

// How a choice key spells each value of its enum.
template <class E>
struct Choice {
  const char* name;
  E value;
};

template <class E, std::size_t N>
std::string choice_names(const Choice<E> (&choices)[N]) {  // "a | b | c"
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : " | ") + std::string(c.name);
  return list;
}

template <class E, std::size_t N>
const char* choice_name(E value, const Choice<E> (&choices)[N]) {
  for (const auto& c : choices)
    if (c.value == value) return c.name;
  return "?";
}

// One key of section S: declared into the deck's schema with S's default, loaded into an S.
template <class S>
struct KeyRow {
  std::string key;  // below the section's prefix: "batch", "actor.path"
  std::function<void(boost::program_options::options_description&, const std::string& name, const S& defaults)> declare;
  std::function<void(const Deck&, const std::string& name, S& out)> load;
};

// A key read as the member's own type (int, double, bool, std::string, std::uint64_t).
template <class S, class T>
KeyRow<S> key(std::string name, T S::*member, Check<T> check, std::string help) {
  return {std::move(name),
          [member, help](boost::program_options::options_description& d, const std::string& full, const S& defaults) {
            d.add_options()(full.c_str(), boost::program_options::value<T>()->default_value(defaults.*member),
                            help.c_str());
          },
          [member, check](const Deck& deck, const std::string& full, S& out) {
            out.*member = deck.get<T>(full);
            if (check) {
              const std::string wrong = check(out.*member);
              if (!wrong.empty()) deck.fail(full, wrong);
            }
          }};
}

template <class S, class T>
KeyRow<S> key(std::string name, T S::*member, std::string help) {
  return key(std::move(name), member, Check<T>{}, std::move(help));
}

// A key whose text names one value of an enum ("ppo | grpo | ..."); --help lists the names.
template <class S, class E, std::size_t N>
KeyRow<S> choice(std::string name, E S::*member, const Choice<E> (&choices)[N], std::string help) {
  const std::vector<Choice<E>> table(std::begin(choices), std::end(choices));
  const std::string names = choice_names(choices);
  return {std::move(name),
          [member, help, table, names](boost::program_options::options_description& d, const std::string& full,
                                       const S& defaults) {
            std::string spelled = "?";
            for (const auto& c : table)
              if (c.value == defaults.*member) spelled = c.name;
            const std::string text = help.empty() ? names : help;
            d.add_options()(full.c_str(), boost::program_options::value<std::string>()->default_value(spelled),
                            text.c_str());
          },
          [member, table, names](const Deck& deck, const std::string& full, S& out) {
            const std::string value = deck.get<std::string>(full);
            for (const auto& c : table)
              if (value == c.name) {
                out.*member = c.value;
                return;
              }
            deck.fail(full, "is '" + value + "'; expected one of: " + names);
          }};
}

// A key written as text and parsed into the member (durations, sizes, lists): `parse` throws
// std::invalid_argument with what is wrong. `default_text` is the deck's spelling of the default.
template <class S, class T>
KeyRow<S> parsed(std::string name, T S::*member, std::string default_text, std::function<T(const std::string&)> parse,
              Check<T> check, std::string help) {
  return {std::move(name),
          [help, default_text](boost::program_options::options_description& d, const std::string& full, const S&) {
            d.add_options()(full.c_str(), boost::program_options::value<std::string>()->default_value(default_text),
                            help.c_str());
          },
          [member, parse, check](const Deck& deck, const std::string& full, S& out) {
            try {
              out.*member = parse(deck.get<std::string>(full));
            } catch (const std::invalid_argument& e) {
              deck.fail(full, e.what());
            }
            if (check) {
              const std::string wrong = check(out.*member);
              if (!wrong.empty()) deck.fail(full, wrong);
            }
          }};
}

template <class S, class T>
KeyRow<S> parsed(std::string name, T S::*member, std::string default_text, std::function<T(const std::string&)> parse,
              std::string help) {
  return parsed(std::move(name), member, std::move(default_text), std::move(parse), Check<T>{}, std::move(help));
}

// A comma-separated list of words ("a, b ,c" -> {"a", "b", "c"}); "" is the empty list.
template <class S>
KeyRow<S> list(std::string name, std::vector<std::string> S::*member, Check<std::vector<std::string>> check,
            std::string help) {
  return parsed<S, std::vector<std::string>>(std::move(name), member, "", split_list, std::move(check), std::move(help));
}

template <class S>
KeyRow<S> list(std::string name, std::vector<std::string> S::*member, std::string help) {
  return list(std::move(name), member, Check<std::vector<std::string>>{}, std::move(help));
}

// The rows of a struct S held in member `inner` of Outer, under the key prefix `prefix`
// ("actor" turns "path" into "actor.path"; "" keeps the keys as they are).
template <class Outer, class S>
std::vector<KeyRow<Outer>> nested(const std::string& prefix, S Outer::*inner, const std::vector<KeyRow<S>>& rows) {
  std::vector<KeyRow<Outer>> out;
  for (const KeyRow<S>& row : rows) {
    auto declare = row.declare;
    auto load = row.load;
    out.push_back({prefix.empty() ? row.key : prefix + "." + row.key,
                   [inner, declare](boost::program_options::options_description& d, const std::string& full,
                                    const Outer& defaults) { declare(d, full, defaults.*inner); },
                   [inner, load](const Deck& deck, const std::string& full, Outer& o) { load(deck, full, o.*inner); }});
  }
  return out;
}

// Row lists one after the other, for a section whose keys come from several lists.
template <class S>
std::vector<KeyRow<S>> joined(std::initializer_list<std::vector<KeyRow<S>>> lists) {
  std::vector<KeyRow<S>> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// What the deck and the Config need of any section, whatever its struct.
class SectionSchema {
 public:
  virtual ~SectionSchema() = default;
  // The section's keys, under a title, for the deck's schema and --help.
  virtual boost::program_options::options_description describe() const = 0;
  // The typed, checked section from `deck`, stored in `config`.
  virtual void load_into(const Deck& deck, Config& config) const = 0;
};

// A deck section: the keys prefix.key of its rows, loaded into an S and checked row by row, then
// by `finish` (checks across keys, members derived from others).
template <class S>
class Section final : public SectionSchema {
 public:
  using Finish = std::function<void(const Deck&, S&)>;
  Section(std::string prefix, std::string title, std::vector<KeyRow<S>> rows, Finish finish = {})
      : prefix_(std::move(prefix)), title_(std::move(title)), rows_(std::move(rows)), finish_(std::move(finish)) {}

  const std::string& prefix() const { return prefix_; }
  std::string name_of(const KeyRow<S>& row) const { return prefix_ + "." + row.key; }

  boost::program_options::options_description describe() const override {
    boost::program_options::options_description d(title_);
    const S defaults{};
    for (const KeyRow<S>& row : rows_) row.declare(d, name_of(row), defaults);
    return d;
  }

  S load(const Deck& deck) const {
    S out{};
    for (const KeyRow<S>& row : rows_) row.load(deck, name_of(row), out);
    if (finish_) finish_(deck, out);
    return out;
  }

  void load_into(const Deck& deck, Config& config) const override { config.set(load(deck)); }

 private:
  std::string prefix_, title_;
  std::vector<KeyRow<S>> rows_;
  Finish finish_;
};

}  // namespace quartet
