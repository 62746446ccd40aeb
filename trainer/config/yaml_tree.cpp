// The YAML tree before it becomes a Config: syntax errors with file, line and
// column; the shape (a map of known sections, each a map of known keys);
// duplicate keys, which yaml-cpp accepts silently but keeps as separate map
// entries, so walking each map finds them; and the "section.key=value"
// command-line overrides, applied in order onto the tree.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "trainer/config/config_internal.hpp"

namespace gt::config_detail {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diag = up;
    }
  }
  return row[b.size()];
}

// Close enough to be a typo: a few edits, or one name a prefix of the other.
bool is_close(const std::string& typed, const std::string& valid, size_t distance) {
  if (distance <= std::max<size_t>(2, typed.size() / 3)) return true;
  return !typed.empty() && (valid.rfind(typed, 0) == 0 || typed.rfind(valid, 0) == 0);
}

// The candidate nearest to `typed`, or "" when none is close.
std::string closest(const std::string& typed, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = 0;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(typed, c);
    if (!is_close(typed, c, d)) continue;
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::vector<std::string> keys_of(const std::string& section) {
  std::vector<std::string> out;
  for (const Field& f : fields())
    if (f.section == section) out.push_back(f.key);
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// "train.seq_len" when `key` is a key of exactly some section, else "".
std::string section_holding(const std::string& key) {
  for (const Field& f : fields())
    if (f.key == key) return f.dotted;
  return "";
}

int line_of(const YAML::Node& n) { return n.Mark().is_null() ? 0 : n.Mark().line + 1; }

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Walks one map (the top level or a section), rejecting non-scalar,
// duplicate and unknown keys. `section` is empty for the top level.
void check_map(const YAML::Node& map, const std::string& section, const std::string& source) {
  std::map<std::string, int> seen;  // dotted key -> line of its first occurrence
  for (const auto& entry : map) {  // not iterator->: its pair is a temporary
    const YAML::Node key_node = entry.first;
    if (!key_node.IsScalar())
      fail("config key (", file_position(source, key_node), "): expected a plain name",
           section.empty() ? "" : " in section " + section, ", got ", describe(key_node));
    const std::string key = key_node.Scalar();
    const std::string dotted = section.empty() ? key : section + "." + key;
    const int line = line_of(key_node);
    const auto [prev, inserted] = seen.emplace(dotted, line);
    if (!inserted)
      fail("duplicate key '", dotted, "' (", source, " lines ", prev->second, " and ", line,
           "): expected each key once, got it twice (yaml-cpp would silently keep one)");
    const bool known = section.empty() ? is_section(key) : find_field(section, key) != nullptr;
    if (!known)
      fail("unknown key '", dotted, "' (", source, ":", line, ")", suggestion(section, key));
  }
}

}  // namespace

// Keys that existed once, and what replaced them.
const char* replacement_of(const std::string& dotted) {
  if (dotted == "runtime.attention_tensor_cores")
    return "runtime.attention (auto|tensor_cores|simt|wgmma; true was tensor_cores, false simt)";
  return nullptr;
}

std::string suggestion(const std::string& section, const std::string& key) {
  if (const char* r = replacement_of(section + "." + key)) return std::string("; it is now ") + r;
  if (section.empty()) {  // a top-level key: a section name, or a key put at the top level
    const std::string d = section_holding(key);  // exact key first: "lr" is train.lr, not log
    if (!d.empty()) return "; did you mean '" + d + "' (keys live under their section)?";
    const std::string s = closest(key, sections());
    if (!s.empty()) return "; did you mean '" + s + "'?";
    return "; valid sections are " + join(sections());
  }
  if (is_section(section)) {
    const std::string k = closest(key, keys_of(section));
    if (!k.empty()) return "; did you mean '" + section + "." + k + "'?";
    const std::string d = section_holding(key);
    if (!d.empty()) return "; did you mean '" + d + "'?";
    return "; valid keys in " + section + " are " + join(keys_of(section));
  }
  // Unknown section in a dotted key: fix the section, then the key.
  const std::string s = closest(section, sections());
  if (!s.empty()) {
    const std::string k = closest(key, keys_of(s));
    if (!k.empty()) return "; did you mean '" + s + "." + k + "'?";
  }
  const std::string d = section_holding(key);
  if (!d.empty()) return "; did you mean '" + d + "'?";
  if (!s.empty()) return "; did you mean section '" + s + "'?";
  return "; valid sections are " + join(sections());
}

std::string file_position(const std::string& source, const YAML::Node& node) {
  const YAML::Mark m = node.Mark();
  if (m.is_null()) return source;
  return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

YAML::Node load_tree(const std::string& text, const std::string& source) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::ParserException& e) {
    if (e.mark.is_null()) fail("YAML syntax error (", source, "): ", e.msg);
    fail("YAML syntax error (", source, ":", e.mark.line + 1, ":", e.mark.column + 1, "): ",
         e.msg);
  } catch (const YAML::Exception& e) {
    fail("config (", source, "): cannot read YAML: ", e.what());
  }
  if (docs.empty()) return YAML::Node(YAML::NodeType::Map);  // empty file: all defaults
  if (docs.size() > 1)
    fail("config (", source, "): expected one YAML document, got ", docs.size(),
         "; remove the '---' separators");
  return docs.front();
}

void check_tree(const YAML::Node& root, const std::string& source) {
  if (root.IsNull()) return;
  if (!root.IsMap())
    fail("config (", file_position(source, root), "): expected a map of sections (",
         join(sections()), ") at the top level, got ", describe(root));
  check_map(root, "", source);
  for (const auto& entry : root) {
    const std::string section = entry.first.Scalar();
    const YAML::Node body = entry.second;
    if (body.IsNull()) continue;  // "log:" with every key commented out
    if (!body.IsMap())
      fail(section, " (", file_position(source, body), "): expected a map of keys (",
           join(keys_of(section)), "), got ", describe(body));
    check_map(body, section, source);
  }
}

std::map<std::string, std::string> apply_overrides(YAML::Node& root,
                                                   const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> origin;  // dotted key -> override text
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const std::string& raw : overrides) {
    const size_t eq = raw.find('=');
    if (eq == std::string::npos)
      fail("override '", raw, "' (command line): expected section.key=value (for example "
           "train.lr=3e-4)");
    const std::string key = trim(raw.substr(0, eq));
    const std::string text = raw.substr(eq + 1);
    if (key.empty())
      fail("override '", raw, "' (command line): expected section.key=value, got an empty key");
    const size_t dot = key.find('.');
    if (dot == std::string::npos)
      fail("override '", raw, "' (command line): expected a key of the form section.key, got '",
           key, "'", suggestion("", key));
    if (dot == 0 || dot + 1 == key.size() || key.find('.', dot + 1) != std::string::npos)
      fail("override '", raw, "' (command line): expected a key of the form section.key (one "
           "section, one key, both non-empty), got '", key, "'");
    const std::string section = key.substr(0, dot);
    const std::string name = key.substr(dot + 1);
    if (!find_field(section, name))
      fail("unknown key '", key, "' (override '", raw, "')", suggestion(section, name));
    const auto [prev, inserted] = origin.emplace(key, raw);
    if (!inserted)
      fail("override '", raw, "' (command line): expected each key once, got ", key,
           " again (already set by '", prev->second, "')");

    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      fail("override '", raw, "' (command line): expected a YAML value, got '", text, "' (",
           e.msg, ")");
    }
    if (!root[section] || root[section].IsNull())
      root[section] = YAML::Node(YAML::NodeType::Map);
    YAML::Node body = root[section];
    body[name] = value;
  }
  return origin;
}

}  // namespace gt::config_detail
