// Checkpoint save/load/discovery; the commit protocol is in the header.
//
// Layout:   <root>/step_00000010/{tensors.safetensors, manifest.json}
// Staging:  <root>/.step_00000010.tmp.<pid>/   (renamed into place when done)
// Replaced: <root>/.step_00000010.old.<pid>/   (a committed dir of the same
//           step moved aside, removed once the new one is in place)
// The manifest is the commit record: it is written last, and a directory
// without one is never loaded.
#include "trainer/checkpoint/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kManifestFile = "manifest.json";

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

// "step_<digits>" -> step; -1 for anything else.
int64_t parse_step_name(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// ".step_<digits>.(tmp|old).<pid>" -> pid; -1 for anything else.
long parse_staging_pid(const std::string& name) {
  if (name.compare(0, 6, ".step_") != 0) return -1;
  for (const char* tag : {".tmp.", ".old."}) {
    const size_t at = name.rfind(tag);
    if (at == std::string::npos || at < 6) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    return std::stol(pid);
  }
  return -1;
}

bool process_alive(long pid) {
  if (pid <= 0) return true;  // unknown: keep it
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open ", path, ": ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read ", path);
  return ss.str();
}

struct FileRecord {
  std::string name;
  uint64_t bytes = 0;
  std::string checksum;  // "crc32c:xxxxxxxx"
};

struct Manifest {
  CheckpointMeta meta;
  std::vector<FileRecord> files;
};

// Reads and validates <dir>/manifest.json; every error names the file.
Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  std::error_code ec;
  if (!fs::exists(path, ec))
    fail("no ", kManifestFile, ": checkpoint ", dir, " was not committed");
  json j;
  try {
    j = json::parse(read_text(path));
  } catch (const json::parse_error& e) {
    fail(path, " is not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(path, " is not a JSON object");
  auto need = [&](const char* key) -> const json& {
    if (!j.contains(key)) fail(path, ": missing field \"", key, "\"");
    return j[key];
  };
  const json& version = need("format_version");
  if (!version.is_number_integer() || version.get<int64_t>() != kFormatVersion)
    fail(path, ": unsupported format_version ", version.dump(), " (this build reads version ",
         kFormatVersion, ")");
  Manifest m;
  try {
    m.meta.step = need("step").get<int64_t>();
    m.meta.sample_position = need("sample_position").get<int64_t>();
    const json& seed = need("seed");
    if (seed.is_string()) {
      const std::string s = seed.get<std::string>();
      size_t used = 0;
      m.meta.seed = std::stoull(s, &used, 10);
      if (used != s.size() || s.empty() || s[0] == '-') fail(path, ": bad seed \"", s, "\"");
    } else {
      m.meta.seed = seed.get<uint64_t>();
    }
    m.meta.model_signature = need("model_signature").get<std::string>();
    m.meta.config_yaml = need("config_yaml").get<std::string>();
    const json& files = need("files");
    if (!files.is_array()) fail(path, ": \"files\" is not an array");
    for (const json& f : files) {
      FileRecord r;
      r.name = f.at("name").get<std::string>();
      r.bytes = f.at("bytes").get<uint64_t>();
      r.checksum = f.at("checksum").get<std::string>();
      // Names are plain file names inside dir: a manifest must not point outside it.
      if (r.name.empty() || r.name.find('/') != std::string::npos || r.name == "." ||
          r.name == "..")
        fail(path, ": bad file name \"", r.name, "\"");
      m.files.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    fail(path, ": malformed field: ", e.what());
  } catch (const std::logic_error& e) {  // stoull
    fail(path, ": malformed seed: ", e.what());
  }
  const bool has_tensors = std::any_of(m.files.begin(), m.files.end(), [](const FileRecord& r) {
    return r.name == kTensorsFile;
  });
  if (!has_tensors) fail(path, ": \"files\" does not list ", kTensorsFile);
  return m;
}

// Cheap check used by discovery: every listed file exists with its size.
void check_sizes(const std::string& dir, const Manifest& m) {
  for (const FileRecord& r : m.files) {
    const std::string p = dir + "/" + r.name;
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) fail(p, " is missing: ", std::strerror(errno));
    if (static_cast<uint64_t>(st.st_size) != r.bytes)
      fail(p, " is ", st.st_size, " bytes, the manifest says ", r.bytes,
           ": the file is corrupt or truncated");
  }
}

void check_checksums(const std::string& dir, const Manifest& m) {
  for (const FileRecord& r : m.files) {
    const std::string p = dir + "/" + r.name;
    if (r.checksum.compare(0, 7, "crc32c:") != 0)
      fail(dir, "/", kManifestFile, ": unknown checksum \"", r.checksum, "\" for ", r.name,
           " (expected crc32c:...)");
    uint64_t bytes = 0;
    const std::string got = format_crc32c(crc32c_file(p, &bytes));
    if (bytes != r.bytes)
      fail(p, " is ", bytes, " bytes, the manifest says ", r.bytes,
           ": the file is corrupt or truncated");
    if (got != r.checksum)
      fail("checksum mismatch in ", p, ": the file is corrupt or truncated (manifest ",
           r.checksum, ", file ", got, ")");
  }
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
  fail("checkpoint ", dir, " was saved for a different model: ", diffs);
}

// Committed checkpoint directories under root, newest first.
std::vector<std::pair<int64_t, std::string>> list_step_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = parse_step_name(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) out.emplace_back(step, e.path().string());
  }
  if (ec) fail("cannot list checkpoint directory ", root, ": ", ec.message());
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return out;
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail("cannot remove ", path, ": ", ec.message());
}

// Deletes committed checkpoints beyond the newest `keep` (never `just_saved`)
// and staging directories whose owning process is gone.
void prune(const std::string& root, int keep, const std::string& just_saved) {
  if (keep > 0) {
    int kept = 0;
    std::error_code ec;
    for (const auto& [step, dir] : list_step_dirs(root)) {
      // Only committed directories count and are deleted; anything else
      // (a hand-made step_* without a manifest) is left for a human.
      if (!fs::exists(dir + "/" + kManifestFile, ec)) continue;
      if (dir == just_saved || kept < keep) {
        ++kept;
        continue;
      }
      remove_tree(dir);
    }
  }
  // Staging dirs of dead processes (a crash mid-save). A live pid's staging
  // dir may be another trainer writing into the same root: left alone.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const long pid = parse_staging_pid(e.path().filename().string());
    if (pid > 0 && pid != ::getpid() && !process_alive(pid)) {
      std::error_code rec;
      fs::remove_all(e.path(), rec);  // best effort: a stale dir is harmless
    }
  }
  fsync_dir(root);
}

}  // namespace

std::string save_checkpoint(const std::string& root, const CheckpointMeta& meta,
                            const std::vector<NamedTensor>& tensors, int keep) {
  if (meta.step < 0) fail("save_checkpoint: negative step ", meta.step);
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    fs::create_directories(root, ec);
    if (ec) fail("cannot create checkpoint directory ", root, ": ", ec.message());
    fsync_dir(parent_dir(fs::absolute(root).lexically_normal().string()));
  }
  const std::string name = step_dir_name(meta.step);
  const std::string final_dir = root + "/" + name;
  const std::string pid = std::to_string(::getpid());
  const std::string tmp_dir = root + "/." + name + ".tmp." + pid;
  const std::string old_dir = root + "/." + name + ".old." + pid;

  remove_tree(tmp_dir);  // leftover of an earlier failed attempt with our pid
  if (!fs::create_directory(tmp_dir, ec))
    fail("cannot create ", tmp_dir, ": ", ec ? ec.message() : "already exists");
  try {
    {
      SafetensorsWriter w;
      for (const NamedTensor& t : tensors) w.add_f32(t.name, t.shape, t.data);
      w.set_metadata("format", "gt-checkpoint");
      w.set_metadata("step", std::to_string(meta.step));
      w.write_atomic(tmp_dir + "/" + kTensorsFile);
    }  // the writer's copy of the tensors is freed before the checksum pass
    uint64_t bytes = 0;
    const uint32_t crc = crc32c_file(tmp_dir + "/" + kTensorsFile, &bytes);

    json manifest = {
        {"format_version", kFormatVersion},
        {"step", meta.step},
        {"sample_position", meta.sample_position},
        // A string: JSON readers that hold numbers as doubles would round a uint64.
        {"seed", std::to_string(meta.seed)},
        {"model_signature", meta.model_signature},
        {"config_yaml", meta.config_yaml},
        {"files", json::array({{{"name", kTensorsFile},
                                {"bytes", bytes},
                                {"checksum", format_crc32c(crc)}}})},
    };
    write_file_atomic(tmp_dir + "/" + kManifestFile, manifest.dump(2) + "\n");  // fsyncs tmp_dir

    // Commit. A committed dir of the same step is moved aside first (rename
    // cannot replace a non-empty directory), and removed only once the new
    // one is in place; if the second rename fails the old one goes back.
    const bool replacing = fs::exists(final_dir, ec);
    if (replacing) {
      remove_tree(old_dir);
      if (::rename(final_dir.c_str(), old_dir.c_str()) != 0)
        fail("cannot move old checkpoint ", final_dir, " aside: ", std::strerror(errno));
    }
    if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      if (replacing) ::rename(old_dir.c_str(), final_dir.c_str());
      fail("cannot rename ", tmp_dir, " to ", final_dir, ": ", why);
    }
    fsync_dir(root);
    if (replacing) remove_tree(old_dir);
  } catch (...) {
    std::error_code rec;
    fs::remove_all(tmp_dir, rec);
    throw;
  }
  prune(root, keep, final_dir);
  return final_dir;
}

CheckpointMeta load_checkpoint(const std::string& dir, const std::string& expected_signature,
                               const std::vector<NamedTensor>& tensors) {
  const Manifest m = read_manifest(dir);
  // Signature before checksums: a wrong model is reported without reading 500 MB.
  check_signature(dir, m.meta.model_signature, expected_signature);
  check_sizes(dir, m);
  check_checksums(dir, m);
  const SafetensorsReader reader(dir + "/" + kTensorsFile);
  for (const NamedTensor& t : tensors) reader.read_f32(t.name, t.shape, t.data);
  return m.meta;
}

std::string find_latest_checkpoint(const std::string& root, std::vector<std::string>* skipped) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return "";
  for (const auto& [step, dir] : list_step_dirs(root)) {
    try {
      const Manifest m = read_manifest(dir);
      if (m.meta.step != step)
        fail(dir, "/", kManifestFile, " says step ", m.meta.step, ", the directory name says ",
             step);
      check_sizes(dir, m);
      return dir;
    } catch (const Error& e) {
      if (skipped) skipped->push_back(dir + ": " + e.what());
    }
  }
  return "";
}

}  // namespace gt
