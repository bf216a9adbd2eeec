#include "quartet/core/cli.hpp"

#include <boost/program_options.hpp>
#include <sstream>

#include "quartet/core/config.hpp"

namespace po = boost::program_options;

namespace quartet {
namespace {
po::options_description command_options(const CommandSpec& spec) {
  po::options_description o("Options");
  if (spec.is_deck())
    o.add_options()("set", po::value<std::vector<std::string>>()->composing(),
                    "override a deck key: --set section.key=value (repeatable)");
  for (const auto& opt : spec.options) {
    if (opt.value_name)
      o.add_options()(opt.name, po::value<std::string>()->value_name(opt.value_name), opt.help);
    else
      o.add_options()(opt.name, opt.help);
  }
  o.add_options()("help,h", "this help");
  return o;
}
}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv,
                               const std::vector<CommandSpec>& commands) {
  CommandLine cl;
  if (argc < 2) throw UsageError("no command given (try quartet --help)");
  std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    cl.help = true;
    return cl;
  }
  if (first == "--version") {
    cl.version = true;
    return cl;
  }
  const CommandSpec* spec = nullptr;
  for (const auto& c : commands)
    if (first == c.name) spec = &c;
  if (!spec) throw UsageError("unknown command '" + first + "' (try quartet --help)");
  cl.command = first;
  if (spec->passthrough) {
    const std::string second = argc > 2 ? argv[2] : "";
    cl.help = second == "--help" || second == "-h";
    int from = second == "--" ? 3 : 2;
    for (int i = from; i < argc && !cl.help; ++i) cl.rest.push_back(argv[i]);
    if (!cl.help && cl.rest.empty())
      throw UsageError("quartet " + first + ": no " + spec->operand + " given (quartet " + first + " " +
                       spec->operand + ")");
    if (!cl.rest.empty()) cl.operand = cl.rest.front();
    return cl;
  }

  po::options_description all = command_options(*spec);
  all.add_options()("operand", po::value<std::string>(), "");
  po::positional_options_description positional;
  positional.add("operand", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc - 1, argv + 1)
                  .options(all)
                  .positional(positional)
                  .style(po::command_line_style::unix_style ^ po::command_line_style::allow_guessing)
                  .run(),
              vm);
  } catch (const po::error& e) {
    throw UsageError(std::string("quartet ") + first + ": " + e.what());
  }
  cl.help = vm.count("help") > 0;
  if (vm.count("operand")) cl.operand = vm["operand"].as<std::string>();
  if (vm.count("set")) cl.overrides = vm["set"].as<std::vector<std::string>>();
  for (const auto& opt : spec->options)
    if (vm.count(opt.name))
      cl.options[opt.name] = opt.value_name ? vm[opt.name].as<std::string>() : std::string();
  if (!cl.help && cl.operand.empty())
    throw UsageError("quartet " + first + ": no " + spec->operand + " given (quartet " + first +
                     " " + spec->operand + ")");
  return cl;
}

std::string top_level_help(const std::vector<CommandSpec>& commands) {
  std::ostringstream s;
  s << "quartet " << QUARTET_VERSION << ": RLHF for large language models over MPI model groups\n\n"
    << "Usage: quartet <command> DECK [--set section.key=value ...]\n"
    << "       quartet <command> --help     its options; for deck commands every deck key\n\n"
    << "Commands:\n";
  for (const auto& c : commands) {
    std::string name = c.name;
    s << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << c.summary
      << "\n";
  }
  s << "\nLaunch one rank per GPU: mpirun -np 8 quartet <command> DECK, or srun under Slurm.\n";
  return s.str();
}

std::string command_help(const CommandSpec& command, const po::options_description& deck_keys) {
  std::ostringstream s;
  s << "Usage: quartet " << command.name << " " << command.operand
    << (command.is_deck() ? " [--set section.key=value ...]" : "")
    << (command.passthrough ? "" : " [options]") << "\n\n"
    << command.summary << "\n\n"
    << command_options(command) << "\n";
  if (!command.is_deck()) return s.str();
  s << "Deck keys ([section] key = default: meaning):\n";
  Deck defaults("defaults", "", {}, deck_keys);
  std::string section;
  for (const auto& opt : deck_keys.options()) {
    const std::string& key = opt->long_name();
    auto dot = key.rfind('.');
    if (key.substr(0, dot) != section) {
      section = key.substr(0, dot);
      s << "  [" << section << "]\n";
    }
    std::string entry = key.substr(dot + 1) + " = " + defaults.value_text(key);
    s << "    " << entry << std::string(entry.size() < 28 ? 28 - entry.size() : 1, ' ')
      << opt->description() << "\n";
  }
  return s.str();
}

}  // namespace quartet
