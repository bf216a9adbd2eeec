#include "quartet/core/config.hpp"

#include "quartet/core/settings.hpp"

namespace quartet {

Config& Config::operator=(const Config& other) {
  if (this != &other) {
    deck = other.deck;
    copy_parts(other);
  }
  return *this;
}

void Config::copy_parts(const Config& other) {
  parts_.clear();
  for (const auto& part : other.parts_) parts_.push_back(part->clone());
}

void* Config::find(const std::type_info& type) const {
  for (const auto& part : parts_)
    if (part->type == type) return part->get();
  fail(__FILE__, __LINE__, std::string("the deck's settings hold no section of type ") + type.name() +
                               " (a section missing from commands/deck_sections.cpp)");
}

DeckSections::DeckSections(std::vector<const SectionSchema*> sections, void (*finish)(Config&))
    : sections_(std::move(sections)), finish_(finish), schema_("Deck keys (section.key, default)") {
  for (const SectionSchema* s : sections_) schema_.add(s->describe());
}

Config DeckSections::load(const Deck& deck) const {
  Config config(deck);
  for (const SectionSchema* s : sections_) s->load_into(config.deck, config);
  if (finish_) finish_(config);
  return config;
}

Config DeckSections::load(const std::string& name, const std::string& text,
                          const std::vector<std::string>& overrides) const {
  return load(Deck(name, text, overrides, schema_));
}

}  // namespace quartet
