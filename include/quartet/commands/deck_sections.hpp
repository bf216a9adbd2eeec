#pragma once
// Every section a deck may hold, each declared with its rows beside the code that reads it: the
// one list from which the deck's schema, --help and the loaded Config come (core/settings.hpp).
#include "quartet/core/config.hpp"

namespace quartet {

const DeckSections& deck_sections();

// Every key a deck may hold, with defaults, units and help: deck_sections().schema().
const boost::program_options::options_description& deck_schema();

// Typed, range-checked configuration: deck_sections().load(deck). Throws DeckError naming key and line.
Config load_config(const Deck& deck);

}  // namespace quartet
