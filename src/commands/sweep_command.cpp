// `quartet sweep`: the sweep file is read and every combination checked as a whole deck before
// any file is written, so a refused sweep leaves nothing half-made behind.
#include "quartet/commands/sweep_command.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "quartet/commands/deck_sections.hpp"
#include "quartet/core/check.hpp"
#include "quartet/core/config.hpp"
#include "quartet/core/deck.hpp"
#include "quartet/core/files.hpp"

namespace quartet {
namespace {

// A cluster's job array limit (MaxArraySize) is often 1001..10001; more runs than this is almost
// certainly a typo in a value list, and would also take long to check.
constexpr long kMaxRuns = 10000;

struct SweptKey {
  std::string key;                  // "section.key"
  int line = 0;                     // its line in the sweep file
  std::vector<std::string> values;  // as spelled there, quotes removed
};

struct SweepFile {
  std::string path;
  std::string deck, out;
  int deck_line = 0, out_line = 0, values_line = 0;
  std::vector<SweptKey> keys;
};

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string section_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

std::string name_in_section(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// The line without its comment: '#' outside double quotes starts one.
std::string strip_comment(const std::string& raw) {
  bool quoted = false;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '"') quoted = !quoted;
    if (raw[i] == '#' && !quoted) return raw.substr(0, i);
  }
  return raw;
}

// "1e-3, 3e-3" -> {"1e-3", "3e-3"}; "\"a, b\", c" -> {"a, b", "c"}.
std::vector<std::string> split_values(const std::string& text, const std::string& here,
                                      const std::string& key) {
  std::vector<std::string> items;
  std::string item;
  bool quoted = false, was_quoted = false;
  auto finish = [&] {
    std::string v = trim(item);
    if (v.empty() && !was_quoted)
      throw DeckError(here + ": " + key + " has an empty value in its list ('" + trim(text) +
                      "'): values are separated by single commas");
    if (v.empty())
      throw DeckError(here + ": " + key + " has an empty quoted value (a deck key cannot be empty)");
    if (v.find('#') != std::string::npos)
      throw DeckError(here + ": " + key + " value '" + v +
                      "' holds '#', which a deck reads as the start of a comment");
    items.push_back(v);
    item.clear();
    was_quoted = false;
  };
  for (char c : text) {
    if (c == '"') {
      if (!quoted && !trim(item).empty())
        throw DeckError(here + ": " + key + ": a quote in the middle of a value ('" + trim(text) +
                        "'); quote whole values only");
      quoted = !quoted;
      was_quoted = true;
      continue;
    }
    if (c == ',' && !quoted) {
      finish();
      continue;
    }
    if (was_quoted && !quoted && c != ' ' && c != '\t' && c != '\r')
      throw DeckError(here + ": " + key + ": text after a closing quote ('" + trim(text) + "')");
    item += c;
  }
  if (quoted) throw DeckError(here + ": " + key + ": a quote is not closed ('" + trim(text) + "')");
  finish();
  return items;
}

SweepFile parse_sweep(const std::string& path, const std::string& text,
                      const boost::program_options::options_description& schema) {
  SweepFile sf;
  sf.path = path;
  std::map<std::string, int> line_of;  // swept key -> line, for repeated keys
  std::istringstream lines(text);
  std::string raw;
  bool in_values = false;
  for (int lineno = 1; std::getline(lines, raw); ++lineno) {
    const std::string here = path + ":" + std::to_string(lineno);
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      const std::string section = line.back() == ']' ? trim(line.substr(1, line.size() - 2)) : "";
      if (section != "values")
        throw DeckError(here + ": unknown section '" + line + "': a sweep file has the keys deck "
                        "and out, then a [values] section of 'section.key = value, value, ...' lines");
      if (in_values)
        throw DeckError(here + ": [values] appears twice (first on line " +
                        std::to_string(sf.values_line) + ")");
      in_values = true;
      sf.values_line = lineno;
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || trim(line.substr(0, eq)).empty())
      throw DeckError(here + ": expected 'key = value' or '[values]', found '" + line + "'");
    const std::string key = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (!in_values) {
      int* at = key == "deck" ? &sf.deck_line : key == "out" ? &sf.out_line : nullptr;
      if (!at)
        throw DeckError(here + ": unknown key '" + key + "' before [values] (known: deck, out" +
                        (key.find('.') != std::string::npos ? "; deck keys to sweep go under [values]"
                                                            : std::string()) + ")");
      if (*at)
        throw DeckError(here + ": " + key + " is set twice (first on line " + std::to_string(*at) + ")");
      if (value.empty()) throw DeckError(here + ": " + key + " has an empty value");
      *at = lineno;
      (key == "deck" ? sf.deck : sf.out) = value;
      continue;
    }
    if (key.find('.') == std::string::npos || !schema.find_nothrow(key, false)) {
      std::string hint;
      if (key == "deck" || key == "out") hint = " (deck and out go before [values])";
      else if (key.find('.') == std::string::npos) hint = " (deck keys are written section.key, e.g. run.seed)";
      else hint = " (quartet train --help lists every key)";
      throw DeckError(here + ": unknown deck key '" + key + "'" + hint);
    }
    if (auto it = line_of.find(key); it != line_of.end())
      throw DeckError(here + ": " + key + " is listed twice (first on line " +
                      std::to_string(it->second) + ")");
    if (value.empty())
      throw DeckError(here + ": " + key + " has no values (list at least one: key = a, b, ...)");
    SweptKey k{key, lineno, split_values(value, here, key)};
    std::set<std::string> seen;
    for (const auto& v : k.values)
      if (!seen.insert(v).second)
        throw DeckError(here + ": " + key + " lists the value '" + v + "' twice (two identical runs)");
    line_of[key] = lineno;
    sf.keys.push_back(std::move(k));
  }
  if (!sf.deck_line) throw DeckError(path + ": no base deck: add a line 'deck = PATH' before [values]");
  if (!in_values || sf.keys.empty())
    throw DeckError(path + ": nothing to sweep: add a [values] section with lines "
                    "'section.key = value, value, ...'");
  return sf;
}

// The base deck's text with `key` set to `value`: the line that sets it is replaced, else a line
// is added after the last key of its section, else the section is appended. Comments and layout
// of everything else stay as they were, so the generated deck reads like the base deck.
std::string set_key(const std::string& text, const std::string& key, const std::string& value,
                    const std::string& note) {
  const std::string section = section_of(key), name = name_in_section(key);
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  std::string current;
  long header = -1, last_key = -1;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string content = trim(lines[i].substr(0, lines[i].find('#')));
    if (content.empty()) continue;
    if (content.front() == '[') {
      current = trim(content.substr(1, content.size() - 2));
      if (current == section && header < 0) header = static_cast<long>(i);
      continue;
    }
    if (current != section) continue;
    last_key = static_cast<long>(i);
    const auto eq = content.find('=');
    if (eq == std::string::npos || trim(content.substr(0, eq)) != name) continue;
    const std::string indent = lines[i].substr(0, lines[i].find_first_not_of(" \t"));
    lines[i] = indent + name + " = " + value + "   # " + note + " (base deck: " +
               trim(content.substr(eq + 1)) + ")";
    header = -2;  // replaced
    break;
  }
  const std::string added = name + " = " + value + "   # " + note;
  if (header >= 0) {
    const long at = std::max(header, last_key) + 1;
    lines.insert(lines.begin() + at, added);
  } else if (header == -1) {
    if (!lines.empty() && !trim(lines.back()).empty()) lines.push_back("");
    lines.push_back("[" + section + "]");
    lines.push_back(added);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

int digits(long n) { return static_cast<int>(std::to_string(n).size()); }

std::string padded(long i, int width) {
  std::ostringstream s;
  s << std::setw(width) << std::setfill('0') << i;
  return s.str();
}

// The resolved values of a deck file, or "" when it cannot be read or parsed.
std::string resolved_or_empty(const std::string& path) {
  try {
    Deck d = Deck::from_file(path, {}, deck_schema());
    load_config(d);
    return d.resolved();
  } catch (const std::exception&) {
    return "";
  }
}

struct Run {
  long index = 0;
  std::vector<std::size_t> choice;  // value index per swept key
  std::string deck_path, text, run_dir, resolved;
};

// What every run of a sweep shares.
struct Sweep {
  std::string path;  // the sweep file
  SweepFile file;
  std::string dir;   // where the decks go
  std::string base_text;
  long count = 1;    // runs
  int width = 1;     // digits of a run's number
  bool sets_out = false, sets_name = false;
  std::string base_name;  // the base deck's run.name

  std::string at_line(int line) const { return path + ":" + std::to_string(line); }
};

// Where the decks go: --out, else the file's out, else runs/<the sweep file's stem>.
std::string output_dir(const CommandLine& cl, const SweepFile& sf, const std::string& sweep_path) {
  std::string dir = cl.has("out") ? cl.options.at("out") : sf.out;
  if (dir.empty()) {
    std::string stem = sweep_path.substr(sweep_path.rfind('/') + 1);  // npos + 1 = 0
    const auto dot = stem.rfind('.');
    if (dot != std::string::npos && dot > 0) stem.resize(dot);
    dir = "runs/" + stem;
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) throw UsageError("--out is empty: give the directory the decks go to");
  return dir;
}

// The product of the value lists, refused past kMaxRuns at the line that passes it.
long run_count(const Sweep& sw) {
  long count = 1;
  for (const auto& k : sw.file.keys) {
    count *= static_cast<long>(k.values.size());
    if (count > kMaxRuns)
      throw DeckError(sw.at_line(k.line) + ": " + k.key + " makes the sweep more than " +
                      std::to_string(kMaxRuns) + " runs (the value lists up to this line make " +
                      std::to_string(count) + ")");
  }
  return count;
}

// The deck as train will read it: the base text with overrides, checked by load_config; its
// resolved values, and run.dir set. A refusal of a swept key names its line here; one about a
// base key names the combination.
std::string check_run_deck(const Sweep& sw, Run& run, const std::vector<std::pair<std::string, std::string>>& sets,
                           const std::string& combination) {
  const auto& schema = deck_schema();
  const SweepFile& sf = sw.file;
  std::vector<std::string> overrides;
  for (const auto& [key, value] : sets) overrides.push_back(key + "=" + value);
  try {
    Deck deck(sf.deck, sw.base_text, overrides, schema);
    load_config(deck);
    run.run_dir = deck.value_text("run.out");
    return deck.resolved();
  } catch (const DeckError& e) {
    std::string message = e.what();
    for (std::size_t k = 0; k < sf.keys.size(); ++k) {  // sets[k] is sf.keys[k]'s value
      const std::string prefix = "--set " + sets[k].first + "=" + sets[k].second + ": ";
      if (message.compare(0, prefix.size(), prefix) == 0)
        throw DeckError(sw.at_line(sf.keys[k].line) + ": " + sets[k].first + " = " + sets[k].second + " (run " +
                        std::to_string(run.index) + " of " + std::to_string(sw.count) +
                        "): " + message.substr(prefix.size()));
    }
    throw DeckError(sw.path + ": run " + std::to_string(run.index) + " of " + std::to_string(sw.count) + " (" +
                    combination + ") is refused: " + message);
  }
}

// The same deck as text: the swept lines replaced in the base deck, with a header.
std::string run_deck_text(const Sweep& sw, const Run& run, const std::vector<std::pair<std::string, std::string>>& sets) {
  const SweepFile& sf = sw.file;
  std::string text = sw.base_text;
  for (std::size_t s = 0; s < sets.size(); ++s) {
    const bool generated = s >= sf.keys.size();
    const std::string note = generated ? "set by quartet sweep for this run" : "swept: " + sw.at_line(sf.keys[s].line);
    text = set_key(text, sets[s].first, sets[s].second, note);
  }
  std::string header = "# " + run.deck_path + " - run " + std::to_string(run.index) + " of " +
                       std::to_string(sw.count) + " of the sweep " + sw.path +
                       ", written by `quartet sweep`\n# (regenerate it rather than edit it). "
                       "The base deck " + sf.deck + ", with:\n";
  for (const auto& [key, value] : sets) header += "#   " + key + " = " + value + "\n";
  header += "# Relative paths are relative to the directory quartet runs in, as in the base deck.\n"
            "# ----------------------------------------------------------------------------\n";
  return header + text;
}

// Run r (0-based) of the sweep: its values, its deck checked as train will read it, and the
// text of that deck, checked to read back as the same values.
Run make_run(const Sweep& sw, long r) {
  const SweepFile& sf = sw.file;
  Run run;
  run.index = r + 1;
  // Mixed radix, the first key slowest: the order of nested loops in the file's order.
  run.choice.resize(sf.keys.size());
  long rest = r;
  for (std::size_t k = sf.keys.size(); k-- > 0;) {
    const long n = static_cast<long>(sf.keys[k].values.size());
    run.choice[k] = static_cast<std::size_t>(rest % n);
    rest /= n;
  }
  const std::string id = padded(run.index, sw.width);
  run.deck_path = sw.dir + "/decks/run_" + id + ".deck";

  std::vector<std::pair<std::string, std::string>> sets;  // key, value
  std::string combination;
  for (std::size_t k = 0; k < sf.keys.size(); ++k) {
    const auto& v = sf.keys[k].values[run.choice[k]];
    sets.emplace_back(sf.keys[k].key, v);
    combination += (combination.empty() ? "" : ", ") + sf.keys[k].key + " = " + v + " (line " +
                   std::to_string(sf.keys[k].line) + ")";
  }
  if (!sw.sets_out) sets.emplace_back("run.out", sw.dir + "/run_" + id);
  if (!sw.sets_name) sets.emplace_back("run.name", sw.base_name + "_" + id);

  const std::string resolved = check_run_deck(sw, run, sets, combination);
  run.text = run_deck_text(sw, run, sets);
  // The text must say exactly what the overrides said: anything else is a bug in set_key.
  Deck written(run.deck_path, run.text, {}, deck_schema());
  load_config(written);
  QUARTET_CHECK(written.resolved() == resolved,
                "quartet sweep: the deck written for run " + std::to_string(run.index) +
                    " does not read back as the base deck with " + combination);
  run.resolved = resolved;
  return run;
}

// A run whose directory an earlier run already has is refused, naming run.out's line.
void check_distinct_dir(const Sweep& sw, const Run& run, std::map<std::string, long>& run_of_dir) {
  if (auto [it, fresh] = run_of_dir.emplace(run.run_dir, run.index); !fresh) {
    int line = 0;
    for (const auto& k : sw.file.keys)
      if (k.key == "run.out") line = k.line;
    throw DeckError(sw.at_line(line) + ": run.out: runs " + std::to_string(it->second) + " and " +
                    std::to_string(run.index) + " would share the run directory " + run.run_dir +
                    " (and resume each other's checkpoints); give every run its own run.out, "
                    "or leave run.out out of the sweep");
  }
}

// A run directory that exists belongs to the deck written for it before: train would resume
// its checkpoints, which must not come from other values.
void check_existing_dirs(const Sweep& sw, const std::vector<Run>& runs) {
  for (const auto& run : runs) {
    if (!path_exists(run.run_dir)) continue;
    if (resolved_or_empty(run.deck_path) == run.resolved) continue;
    throw DeckError(sw.path + ": run " + std::to_string(run.index) + "'s directory " + run.run_dir +
                    " already exists, and " + run.deck_path +
                    (is_regular_file(run.deck_path) ? " there now has other values"
                                                    : " that made it is missing") +
                    ": train would resume that run's checkpoints with this run's values. Remove " +
                    run.run_dir + ", or write this sweep elsewhere (--out DIR)");
  }
}

// The summary: one row per run with its values, as spelled in the sweep file, and how to submit.
void print_summary(const Sweep& sw, const std::vector<Run>& runs, const std::string& list_path, std::ostream& out) {
  const SweepFile& sf = sw.file;
  std::vector<std::string> head{"run"};
  for (const auto& k : sf.keys) head.push_back(k.key);
  head.push_back("deck");
  std::vector<std::size_t> w(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) w[c] = head[c].size();
  std::vector<std::vector<std::string>> rows;
  for (const auto& run : runs) {
    std::vector<std::string> row{std::to_string(run.index)};
    for (std::size_t k = 0; k < sf.keys.size(); ++k) row.push_back(sf.keys[k].values[run.choice[k]]);
    row.push_back(run.deck_path);
    for (std::size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
    rows.push_back(std::move(row));
  }
  const long count = sw.count;
  out << "sweep " << sw.path << ": " << count << (count == 1 ? " run" : " runs") << " of " << sf.deck << "\n";
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      std::string cell = row[c];
      if (c == 0) cell = std::string(w[c] - cell.size(), ' ') + cell;  // numbers to the right
      else if (c + 1 < row.size()) cell += std::string(w[c] - cell.size(), ' ');
      line += (c ? "  " : "") + cell;
    }
    out << line << "\n";
  };
  print(head);
  // A long sweep shows its start and end: every deck's header says its values anyway.
  const std::size_t shown = rows.size() > 60 ? 50 : rows.size();
  for (std::size_t r = 0; r < shown; ++r) print(rows[r]);
  if (shown < rows.size()) {
    out << "... " << rows.size() - shown - 5 << " more runs (each deck's header lists its values)\n";
    for (std::size_t r = rows.size() - 5; r < rows.size(); ++r) print(rows[r]);
  }
  out << "wrote " << count << (count == 1 ? " deck" : " decks") << " and " << list_path
      << " (line i: run i; run i writes to " << (sw.sets_out ? "its run.out" : sw.dir + "/run_<i>") << ")\n"
      << "submit all runs, one array task each:\n"
      << "  sbatch --array=1-" << count << " slurm/sweep.sbatch " << list_path << "\n";
  if (count > 4)
    out << "(--array=1-" << count << "%4 runs at most 4 at a time; a requeued task resumes from "
        << "its own checkpoints)\n";
}

}  // namespace

void sweep_to(const CommandLine& cl, std::ostream& out) {
  const auto& schema = deck_schema();
  Sweep sw;
  sw.path = cl.operand;
  sw.file = parse_sweep(sw.path, read_deck_file(sw.path), schema);
  const SweepFile& sf = sw.file;
  sw.dir = output_dir(cl, sf, sw.path);

  if (!is_regular_file(sf.deck))
    throw DeckError(sw.at_line(sf.deck_line) + ": deck = " + sf.deck +
                    ": no such file (the path is relative to the current directory)");
  sw.base_text = read_deck_file(sf.deck);
  // Syntax and unknown keys of the base deck, naming its lines. Its values are checked per run
  // below: a base deck may be incomplete on its own in ways the swept keys complete.
  const Deck base(sf.deck, sw.base_text, {}, schema);

  sw.count = run_count(sw);
  sw.width = digits(sw.count);
  auto swept = [&](const std::string& key) {
    return std::any_of(sf.keys.begin(), sf.keys.end(), [&](const SweptKey& k) { return k.key == key; });
  };
  sw.sets_out = swept("run.out");
  sw.sets_name = swept("run.name");
  sw.base_name = base.value_text("run.name");

  std::vector<Run> runs;
  runs.reserve(static_cast<std::size_t>(sw.count));
  std::map<std::string, long> run_of_dir;  // run.out -> run, for collisions
  for (long r = 0; r < sw.count; ++r) {
    runs.push_back(make_run(sw, r));
    check_distinct_dir(sw, runs.back(), run_of_dir);
  }
  check_existing_dirs(sw, runs);

  make_directories(sw.dir + "/decks");
  std::string list;
  for (const auto& run : runs) {
    write_text_atomically(run.deck_path, run.text);
    list += run.deck_path + "\n";
  }
  const std::string list_path = sw.dir + "/decks.list";
  write_text_atomically(list_path, list);
  print_summary(sw, runs, list_path, out);
}

int run_sweep(const CommandLine& cl) {
  try {
    sweep_to(cl, std::cout);
    std::cout.flush();
    return 0;
  } catch (const DeckError& e) {
    std::fprintf(stderr, "quartet sweep: error: %s\n", e.what());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "quartet sweep: error: %s\n", e.what());
  }
  return 2;
}

}  // namespace quartet
