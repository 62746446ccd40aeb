// The tensors of an HF checkpoint, however it is stored: one .safetensors
// file, or several listed by a model.safetensors.index.json ("weight_map":
// tensor name -> file, HF's sharded layout), or a directory holding either
// (model.safetensors.index.json first, then model.safetensors). Each tensor
// is read from the file that holds it; messages name that file.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer/io/safetensors.hpp"

namespace gt {

class HfTensorFiles {
 public:
  // Throws gt::Error naming `path` when it is none of the above, when the
  // index is not valid JSON with a weight_map of strings, or when a file it
  // names is missing or maps a tensor the file does not hold.
  explicit HfTensorFiles(const std::string& path);

  const std::string& path() const { return path_; }  // as given
  bool has(const std::string& name) const;
  const SafetensorInfo& info(const std::string& name) const;  // throws naming the tensor
  // The file holding `name` (for messages).
  const std::string& file_of(const std::string& name) const;
  // SafetensorsReader::read_f32 on the file holding `name`.
  void read_f32(const std::string& name, const std::vector<int64_t>& expected_shape,
                float* dst) const;

 private:
  const SafetensorsReader& reader_of(const std::string& name) const;
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index into files_
};

}  // namespace gt
