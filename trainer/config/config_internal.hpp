// Private pieces of the config loader, shared by config.cpp (public API and
// value validation), schema.cpp (the key table: every key, how it is read
// from YAML and how it is written back) and yaml_tree.cpp (the YAML tree:
// syntax errors, structure, duplicate and unknown keys, command-line
// overrides). Nothing here is part of the trainer's API.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainer/config/config.hpp"

namespace gt::config_detail {

// One key of the schema. `read` converts the YAML value into the struct
// field (throwing gt::Error naming `where` and `dotted` on a wrong type);
// `write` renders the field as a YAML value that `read` turns back into the
// identical field.
struct Field {
  std::string section;
  std::string key;
  std::string dotted;  // "section.key"
  // Set for keys of some model families only: to_yaml writes them for
  // those, and setting one on another family is an error naming it.
  std::vector<ModelArch> only;  // empty: every family
  bool applies_to(ModelArch a) const {
    return only.empty() || std::find(only.begin(), only.end(), a) != only.end();
  }
  void (*read)(Config& c, const YAML::Node& value, const std::string& where,
               const std::string& dotted);
  std::string (*write)(const Config& c);
};

// Every key, in canonical order (sections in the order of Config's members).
const std::vector<Field>& fields();
// Section names in canonical order.
const std::vector<std::string>& sections();
// nullptr when the key is not in the schema.
const Field* find_field(const std::string& section, const std::string& key);
bool is_section(const std::string& name);

// "; did you mean 'train.lr_schedule'?" or a list of the section's valid
// keys when nothing is close; `section` empty for a top-level key.
std::string suggestion(const std::string& section, const std::string& key);

// Text → YAML tree; syntax errors as "<source>:<line>:<col>: ...".
YAML::Node load_tree(const std::string& text, const std::string& source);

// The tree's shape: a map of known sections, each a map (or null) of known,
// unique keys. Errors name the dotted key, the source and the line.
void check_tree(const YAML::Node& root, const std::string& source);

// Parses and applies "section.key=value" overrides in order; returns, for
// every overridden dotted key, the override text (for messages).
std::map<std::string, std::string> apply_overrides(YAML::Node& root,
                                                   const std::vector<std::string>& overrides);

// What a node holds, for "got ..." in messages: "'ten'", "the quoted string
// '10'", "a list", "a map", "nothing (null)".
std::string describe(const YAML::Node& n);

// "<source>:<line>:<col>" for a node from the file (or just the source when
// the node carries no position).
std::string file_position(const std::string& source, const YAML::Node& node);

}  // namespace gt::config_detail
