#include "quartet/core/reward_kind.hpp"

#include <stdexcept>

namespace quartet {

namespace {

using Type = RewardKind::Type;

struct Named {
  const char* name;
  Type type;
  bool argument;  // what follows ':' is part of the kind
};
constexpr Named kKinds[] = {{"model", Type::model, false},   {"rule", Type::rule, true},
                            {"math", Type::math, false},     {"match", Type::match, false},
                            {"regex", Type::regex, false},   {"format", Type::format, false},
                            {"command", Type::command, true}, {"http", Type::http, true},
                            {"https", Type::http, true}};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

const char* RewardKind::type_name() const {
  for (const Named& k : kKinds)
    if (k.type == type) return k.name;
  return "?";
}

std::string reward_kind_list() {
  return "model, rule:<task>, math, match, regex, format, command:<command line>, http://...";
}

RewardKind parse_reward_kind(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string head = text.substr(0, colon);
  for (const Named& k : kKinds) {
    if (head != k.name) continue;
    const bool argument_given = colon != std::string::npos && colon + 1 < text.size();
    if (k.type == Type::command && (colon == std::string::npos || text.find_first_not_of(" \t", colon + 1) == std::string::npos))
      throw std::invalid_argument(": command: needs the command line to run after it");
    if (k.argument && !argument_given)
      throw std::invalid_argument(": " + head + " needs what follows its ':' (" + reward_kind_list() + ")");
    if (!k.argument && colon != std::string::npos) throw std::invalid_argument(": " + head + " takes no ':' argument");
    RewardKind kind;
    kind.type = k.type;
    kind.text = text;
    if (k.type == Type::http) {
      // "http://h/x" is a URL as it stands; after "http:" anything else is the URL ("http:https://h/x").
      kind.argument = starts_with(text, "http://") || starts_with(text, "https://") ? text : text.substr(colon + 1);
    } else if (k.argument) {
      kind.argument = text.substr(colon + 1);
    }
    return kind;
  }
  throw std::invalid_argument(", which is not a reward kind (known: " + reward_kind_list() + ")");
}

}  // namespace quartet
