#pragma once
// A loaded deck: the Deck itself (errors name its keys and lines) and one typed struct per
// section, each declared with its rows beside the code that reads it (core/settings.hpp). A
// layer reads the sections it can see: config.get<RolloutConfig>().batch. The sections a deck
// may hold are listed once, at the top (commands/deck_sections.hpp).
#include <boost/program_options/options_description.hpp>

#include <memory>
#include <string>
#include <typeindex>
#include <typeinfo>
#include <utility>
#include <vector>

#include "quartet/core/check.hpp"
#include "quartet/core/deck.hpp"

namespace quartet {

class SectionSchema;

class Config {
 public:
  explicit Config(Deck deck) : deck(std::move(deck)) {}
  Config(const Config& other) : deck(other.deck) { copy_parts(other); }
  Config& operator=(const Config& other);
  Config(Config&&) = default;
  Config& operator=(Config&&) = default;

  Deck deck;  // the parsed deck, for errors naming key and line

  // The section S, as the deck set it. Every section of the deck's list is there once loaded.
  template <class S>
  const S& get() const {
    return *static_cast<const S*>(find(typeid(S)));
  }
  // The same, to change: the memory plan's advice tries other values; tests set up cases.
  template <class S>
  S& edit() {
    return *static_cast<S*>(find(typeid(S)));
  }
  // Stores (or replaces) section S.
  template <class S>
  void set(S value) {
    for (auto& part : parts_)
      if (part->type == typeid(S)) {
        *static_cast<S*>(part->get()) = std::move(value);
        return;
      }
    parts_.push_back(std::make_unique<PartOf<S>>(std::move(value)));
  }

 private:
  struct Part {
    explicit Part(std::type_index t) : type(t) {}
    virtual ~Part() = default;
    virtual std::unique_ptr<Part> clone() const = 0;
    virtual void* get() = 0;
    std::type_index type;
  };
  template <class S>
  struct PartOf final : Part {
    explicit PartOf(S v) : Part(typeid(S)), value(std::move(v)) {}
    std::unique_ptr<Part> clone() const override { return std::make_unique<PartOf<S>>(value); }
    void* get() override { return &value; }
    S value;
  };
  void* find(const std::type_info& type) const;
  void copy_parts(const Config& other);
  std::vector<std::unique_ptr<Part>> parts_;
};

// The sections a deck may hold: its schema (every key, with its type, default and help, grouped
// by section) and the loader of a Config with every section typed and checked.
class DeckSections {
 public:
  // `finish`: checks and derived members that span sections, after every section is loaded.
  DeckSections(std::vector<const SectionSchema*> sections, void (*finish)(Config&) = nullptr);
  const boost::program_options::options_description& schema() const { return schema_; }
  Config load(const Deck& deck) const;
  // The deck at `path` (or its text), with `--set` overrides, loaded; a DeckError names what is wrong.
  Config load(const std::string& name, const std::string& text, const std::vector<std::string>& overrides) const;

 private:
  std::vector<const SectionSchema*> sections_;
  void (*finish_)(Config&);
  boost::program_options::options_description schema_;
};

}  // namespace quartet
