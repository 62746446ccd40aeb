// manifest.json and sidecar reading/writing; the format is in the header.
#include "trainer/checkpoint/manifest.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "trainer/checkpoint/box_tiling.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt::ckpt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read ", path);
  return ss.str();
}

json parse_json_file(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text(path));
  } catch (const json::parse_error& e) {
    fail(path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(path, " is not a JSON object");
  return j;
}

const json& need(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) fail(path, ": missing field \"", key, "\"");
  return j[key];
}

json files_json(const std::vector<FileRecord>& files) {
  json out = json::array();
  for (const FileRecord& f : files)
    out.push_back({{"name", f.name}, {"bytes", f.bytes}, {"checksum", f.checksum}});
  return out;
}

json tensors_json(const std::map<std::string, TensorRecord>& tensors) {
  json out = json::object();
  for (const auto& [name, t] : tensors) {
    json pieces = json::array();
    for (const PieceRecord& p : t.pieces)
      pieces.push_back({{"file", p.file},
                        {"entry", p.entry},
                        {"box", {p.box.row0, p.box.rows, p.box.col0, p.box.cols}}});
    out[name] = {{"shape", t.shape}, {"pieces", std::move(pieces)}};
  }
  return out;
}

std::vector<FileRecord> parse_files(const json& files, const std::string& path) {
  if (!files.is_array()) fail(path, ": \"files\" is not an array");
  std::vector<FileRecord> out;
  for (const json& f : files) {
    FileRecord r;
    r.name = f.at("name").get<std::string>();
    r.bytes = f.at("bytes").get<uint64_t>();
    r.checksum = f.at("checksum").get<std::string>();
    // Names are plain file names inside dir: a manifest must not point outside it.
    if (r.name.empty() || r.name.find('/') != std::string::npos || r.name == "." ||
        r.name == "..")
      fail(path, ": bad file name \"", r.name, "\"");
    for (const FileRecord& seen : out)
      if (seen.name == r.name) fail(path, ": file ", r.name, " is listed twice");
    out.push_back(std::move(r));
  }
  return out;
}

std::map<std::string, TensorRecord> parse_tensors(const json& tensors,
                                                  const std::vector<FileRecord>& files,
                                                  const std::string& path) {
  if (!tensors.is_object()) fail(path, ": \"tensors\" is not an object");
  std::map<std::string, TensorRecord> out;
  for (const auto& [name, t] : tensors.items()) {
    const std::string where = path + ": tensor " + name;
    TensorRecord rec;
    rec.shape = t.at("shape").get<std::vector<int64_t>>();
    if (rec.shape.empty() || rec.shape.size() > 2 ||
        std::any_of(rec.shape.begin(), rec.shape.end(), [](int64_t d) { return d < 0; }))
      fail(where, ": shape ", shape_str(rec.shape), " is not 1-D or 2-D with sizes >= 0");
    const TensorBox whole = whole_box(rec.shape);
    const json& pieces = t.at("pieces");
    if (!pieces.is_array()) fail(where, ": \"pieces\" is not an array");
    for (const json& p : pieces) {
      PieceRecord pr;
      pr.file = p.at("file").get<std::string>();
      pr.entry = p.at("entry").get<std::string>();
      const auto b = p.at("box").get<std::vector<int64_t>>();
      if (b.size() != 4)
        fail(where, ": box ", p.at("box").dump(), " is not [row0, rows, col0, cols]");
      pr.box = TensorBox{b[0], b[1], b[2], b[3]};
      if (box_empty(pr.box) || !box_inside(pr.box, whole))
        fail(where, ": box ", p.at("box").dump(), " is empty or outside shape ",
             shape_str(rec.shape));
      if (std::none_of(files.begin(), files.end(),
                       [&](const FileRecord& f) { return f.name == pr.file; }))
        fail(where, ": piece in file ", pr.file, ", which \"files\" does not list");
      if (pr.entry.empty()) fail(where, ": piece with an empty entry name");
      rec.pieces.push_back(std::move(pr));
    }
    out.emplace(name, std::move(rec));
  }
  return out;
}

// "k=v,k=v" -> ordered pairs; false when it is not of that form.
bool split_signature(const std::string& s, std::vector<std::pair<std::string, std::string>>* out) {
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    out->emplace_back(item.substr(0, eq), item.substr(eq + 1));
  }
  return !out->empty();
}

}  // namespace

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("checkpoint (", dir, "): expected a committed checkpoint, got no ", kManifestFile,
         ": it was not committed (a save that did not finish, or not a checkpoint directory)");
  const json j = parse_json_file(path);
  const json& version = need(j, "format_version", path);
  if (!version.is_number_integer() ||
      (version.get<int64_t>() != 1 && version.get<int64_t>() != kFormatVersion))
    fail("checkpoint manifest (", path, "): expected format_version 1 or ", kFormatVersion,
         " (what this build reads), got format_version ", version.dump());
  Manifest m;
  m.format_version = version.get<int>();
  try {
    m.meta.step = need(j, "step", path).get<int64_t>();
    m.meta.sample_position = need(j, "sample_position", path).get<int64_t>();
    const json& seed = need(j, "seed", path);
    if (seed.is_string()) {
      const std::string s = seed.get<std::string>();
      size_t used = 0;
      m.meta.seed = std::stoull(s, &used, 10);
      if (used != s.size() || s.empty() || s[0] == '-') fail(path, ": bad seed \"", s, "\"");
    } else {
      m.meta.seed = seed.get<uint64_t>();
    }
    m.meta.model_signature = need(j, "model_signature", path).get<std::string>();
    m.meta.config_yaml = need(j, "config_yaml", path).get<std::string>();
    m.files = parse_files(need(j, "files", path), path);
    if (m.format_version == 1) {
      // Version 1 trainers resumed AdamW at t = step.
      m.meta.optimizer_step = m.meta.step;
      const bool has_tensors = std::any_of(m.files.begin(), m.files.end(), [](const FileRecord& r) {
        return r.name == kV1TensorsFile;
      });
      if (!has_tensors) fail(path, ": \"files\" does not list ", kV1TensorsFile);
    } else {
      m.meta.optimizer_step = need(j, "optimizer_step", path).get<int64_t>();
      m.meta.layout = need(j, "layout", path).get<std::string>();
      m.tensors = parse_tensors(need(j, "tensors", path), m.files, path);
    }
  } catch (const json::exception& e) {
    fail(path, ": malformed field: ", e.what());
  } catch (const std::logic_error& e) {  // stoull
    fail(path, ": malformed seed: ", e.what());
  }
  return m;
}

std::string manifest_text(const Manifest& m) {
  const json j = {
      {"format_version", kFormatVersion},
      {"step", m.meta.step},
      {"sample_position", m.meta.sample_position},
      // A string: JSON readers that hold numbers as doubles would round a uint64.
      {"seed", std::to_string(m.meta.seed)},
      {"optimizer_step", m.meta.optimizer_step},
      {"layout", m.meta.layout},
      {"model_signature", m.meta.model_signature},
      {"config_yaml", m.meta.config_yaml},
      {"files", files_json(m.files)},
      {"tensors", tensors_json(m.tensors)},
  };
  return j.dump(1) + "\n";
}

std::string sidecar_text(const Sidecar& s) {
  const json j = {
      {"rank", s.rank}, {"files", files_json(s.files)}, {"tensors", tensors_json(s.tensors)}};
  return j.dump() + "\n";
}

Sidecar read_sidecar(const std::string& path) {
  const json j = parse_json_file(path);
  Sidecar s;
  try {
    s.rank = need(j, "rank", path).get<int>();
    s.files = parse_files(need(j, "files", path), path);
    s.tensors = parse_tensors(need(j, "tensors", path), s.files, path);
  } catch (const json::exception& e) {
    fail(path, ": malformed field: ", e.what());
  }
  return s;
}

void load_v1_index(const std::string& dir, Manifest* m) {
  const auto it = std::find_if(m->files.begin(), m->files.end(),
                               [](const FileRecord& r) { return r.name == kV1TensorsFile; });
  GT_CHECK(it != m->files.end(), "read_manifest let a version-1 manifest without ",
           kV1TensorsFile, " through");
  check_size(dir, *it);  // a truncated file is reported as such, not as a bad header
  const SafetensorsReader reader(dir + "/" + kV1TensorsFile);
  for (const std::string& name : reader.names()) {
    const SafetensorInfo& info = reader.info(name);
    if (info.shape.empty() || info.shape.size() > 2) continue;  // not loadable as a piece
    TensorRecord rec;
    rec.shape = info.shape;
    const TensorBox whole = whole_box(info.shape);
    if (!box_empty(whole)) rec.pieces.push_back(PieceRecord{kV1TensorsFile, name, whole});
    m->tensors.emplace(name, std::move(rec));
  }
}

void check_size(const std::string& dir, const FileRecord& r) {
  const std::string p = dir + "/" + r.name;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0)
    fail("checkpoint file missing (", p, "): expected ", r.bytes,
         " bytes as the manifest says, got ", std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != r.bytes)
    fail("checkpoint file corrupt or truncated (", p, "): expected ", r.bytes,
         " bytes as the manifest says, got ", st.st_size);
}

void check_checksum(const std::string& dir, const FileRecord& r) {
  const std::string p = dir + "/" + r.name;
  if (r.checksum.compare(0, 7, "crc32c:") != 0)
    fail(dir, "/", kManifestFile, ": unknown checksum \"", r.checksum, "\" for ", r.name,
         " (expected crc32c:...)");
  check_size(dir, r);  // "missing" reads better than a failed open
  uint64_t bytes = 0;
  const std::string got = format_crc32c(crc32c_file(p, &bytes));
  if (bytes != r.bytes)
    fail("checkpoint file corrupt or truncated (", p, "): expected ", r.bytes,
         " bytes as the manifest says, got ", bytes);
  if (got != r.checksum)
    fail("checksum mismatch (", p, "): expected ", r.checksum, " as the manifest says, got ", got,
         ": the file is corrupt or truncated");
}

void check_signature(const std::string& dir, const std::string& saved,
                     const std::string& expected) {
  if (saved == expected) return;
  std::vector<std::pair<std::string, std::string>> a, b;
  std::string diffs;
  if (split_signature(saved, &a) && split_signature(expected, &b)) {
    std::map<std::string, std::string> bm(b.begin(), b.end()), am(a.begin(), a.end());
    auto add = [&](const std::string& k, const std::string& ck, const std::string& cc) {
      diffs += (diffs.empty() ? "" : "; ") + k + ": checkpoint " + ck + ", config " + cc;
    };
    for (const auto& [k, v] : a) {
      const auto it = bm.find(k);
      if (it == bm.end()) add(k, v, "(absent)");
      else if (it->second != v) add(k, v, it->second);
    }
    for (const auto& [k, v] : b)
      if (!am.count(k)) add(k, "(absent)", v);
  }
  if (diffs.empty()) diffs = "checkpoint \"" + saved + "\", config \"" + expected + "\"";
  fail("checkpoint of a different model (", dir, "): expected the config's model, got ", diffs);
}

}  // namespace gt::ckpt
