#include "trainer/io/hf_tensor_files.hpp"

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/core/error.hpp"
#include "trainer/io/atomic_file.hpp"

namespace gt {

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

HfTensorFiles::HfTensorFiles(const std::string& path) : path_(path) {
  std::string file = path;
  if (is_dir(path)) {
    const std::string index = path + "/model.safetensors.index.json";
    const std::string single = path + "/model.safetensors";
    if (is_file(index))
      file = index;
    else if (is_file(single))
      file = single;
    else
      fail("HF weights (", path,
           "): expected a directory holding model.safetensors or "
           "model.safetensors.index.json, got neither");
  }
  if (!ends_with(file, ".json")) {
    files_.push_back(std::make_unique<SafetensorsReader>(file));
    for (const std::string& n : files_.back()->names()) where_[n] = 0;
    return;
  }
  // A sharded checkpoint: each shard file opened once.
  std::ifstream in(file);
  if (!in) fail("HF weights index (", file, "): expected a readable file");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception&) {
    fail("HF weights index (", file, "): expected JSON, got text that does not parse");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("HF weights index (", file, "): expected an object with a \"weight_map\" object");
  const std::string dir = parent_dir(file);
  std::map<std::string, size_t> opened;
  for (const auto& [tensor, shard] : j["weight_map"].items()) {
    if (!shard.is_string() || shard.get<std::string>().empty() ||
        shard.get<std::string>().find('/') != std::string::npos)
      fail("HF weights index (", file, "): weight_map entry for tensor ", "'" + tensor + "'",
           " expected a file name in the index's directory");
    const std::string name = shard.get<std::string>();
    auto it = opened.find(name);
    if (it == opened.end()) {
      files_.push_back(std::make_unique<SafetensorsReader>(dir + "/" + name));
      it = opened.emplace(name, files_.size() - 1).first;
    }
    if (!files_[it->second]->has(tensor))
      fail("HF weights index (", file, "): maps tensor ", "'" + tensor + "'", " to ", name,
           ", which does not hold it");
    where_[tensor] = it->second;
  }
}

bool HfTensorFiles::has(const std::string& name) const { return where_.count(name) != 0; }

const SafetensorsReader& HfTensorFiles::reader_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) fail("HF weights (", path_, "): no tensor ", name);
  return *files_[it->second];
}

const SafetensorInfo& HfTensorFiles::info(const std::string& name) const {
  return reader_of(name).info(name);
}

const std::string& HfTensorFiles::file_of(const std::string& name) const {
  return reader_of(name).path();
}

void HfTensorFiles::read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                             float* dst) const {
  reader_of(name).read_f32(name, expected_shape, dst);
}

}  // namespace gt
