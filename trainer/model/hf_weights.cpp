#include "trainer/model/hf_weights.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "kernels/core/error.hpp"
#include "trainer/io/atomic_file.hpp"
#include "trainer/io/hf_tensor_files.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {

namespace {
// The tensor's shape in an HF file: padding rows left out (the vocabulary
// holds the true rows), Conv1D weights transposed.
std::vector<int64_t> hf_shape(const ParamSpec& s) {
  if (s.pad_rows) return {s.real_rows(), s.shape[1]};
  if (!s.hf_transposed) return s.shape;
  return {s.shape[1], s.shape[0]};
}
int64_t hf_numel(const ParamSpec& s) { return s.numel - s.pad_rows * (s.numel / s.shape[0]); }

// (rows, cols) -> (cols, rows)
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// The name our parameter has in this file: the family's, or the prefix
// variant the file uses (GPT-2 with "transformer.", Llama without "model.").
class FileNames {
 public:
  FileNames(const HfTensorFiles& files, const ModelConfig& m) {
    if (m.arch == ModelArch::gpt2)
      prefix_ =
          !files.has("wte.weight") && files.has("transformer.wte.weight") ? "transformer." : "";
    else
      prefix_ = !files.has("model.embed_tokens.weight") && files.has("embed_tokens.weight")
                    ? ""
                    : "model.";
  }
  std::string operator()(const std::string& ours) const {
    if (ours == "lm_head.weight") return ours;  // never prefixed
    return prefix_ + ours;
  }

 private:
  std::string prefix_;
};

// A file of the other family, named before its tensors are listed as missing.
void check_family(const HfTensorFiles& files, const ModelConfig& m) {
  const bool gpt2 = files.has("wte.weight") || files.has("transformer.wte.weight");
  const bool llama = files.has("model.embed_tokens.weight") || files.has("embed_tokens.weight");
  if (m.llama_family() && gpt2 && !llama)
    fail("HF weights (", files.path(), "): hold GPT-2 tensors (wte.weight), but model.arch=",
         to_string(m.arch));
  // Llama and Mixtral share every name but the MLP's: block 0's tells them apart.
  const bool dense = files.has("model.layers.0.mlp.gate_proj.weight") ||
                     files.has("layers.0.mlp.gate_proj.weight");
  const bool sparse = files.has("model.layers.0.block_sparse_moe.gate.weight") ||
                      files.has("layers.0.block_sparse_moe.gate.weight");
  if (m.arch == ModelArch::llama && sparse && !dense)
    fail("HF weights (", files.path(),
         "): hold Mixtral tensors (layers.0.block_sparse_moe.gate.weight), but model.arch=llama");
  if (m.arch == ModelArch::mixtral && dense && !sparse)
    fail("HF weights (", files.path(),
         "): hold dense Llama tensors (layers.0.mlp.gate_proj.weight), but model.arch=mixtral");
  if (m.arch == ModelArch::gpt2 && llama && !gpt2)
    fail("HF weights (", files.path(),
         "): hold Llama tensors (model.embed_tokens.weight), but "
         "model.arch=gpt2");
}

// Every tensor the model needs, checked before any is read: one message
// listing each that is missing, of another shape or of a dtype we cannot read.
void check_tensors(const HfTensorFiles& files, const FileNames& name_of,
                   const ParameterLayout& layout) {
  std::vector<std::string> problems;
  for (const auto& s : layout.specs()) {
    const std::string name = name_of(s.name);
    if (!files.has(name)) {
      problems.push_back(name + " (not found)");
      continue;
    }
    const SafetensorInfo& info = files.info(name);
    const std::vector<int64_t> want = hf_shape(s);
    if (info.shape != want) {
      std::string p =
          name + ": expected shape " + shape_str(want) + ", got " + shape_str(info.shape);
      // A 2-D weight stored the other way round (torch Linear [out, in]
      // instead of HF GPT-2's Conv1D [in, out], or the reverse).
      if (want.size() == 2 && want[0] != want[1] &&
          info.shape == std::vector<int64_t>{want[1], want[0]})
        p += std::string(" (") +
             (s.hf_transposed ? "HF GPT-2 Conv1D layout [in, out]" : "[out, in]") +
             "): the weight is stored transposed";
      problems.push_back(p);
    } else if (info.dtype != "F32" && info.dtype != "BF16" && info.dtype != "F16") {
      problems.push_back(name + ": dtype " + info.dtype + ", expected F32, BF16 or F16");
    }
  }
  if (problems.empty()) return;
  std::string list;
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i == 8) {
      list += "; and " + std::to_string(problems.size() - 8) + " more";
      break;
    }
    list += (i ? "; " : "") + problems[i];
  }
  fail("HF weights (", files.path(), "): ", problems.size(),
       problems.size() == 1 ? " tensor does" : " tensors do", " not match the model: ", list);
}
}  // namespace

std::string hf_tensor_name(const ModelConfig& m, const std::string& ours) {
  if (m.llama_family() && ours != "lm_head.weight") return "model." + ours;
  return ours;
}

void for_each_hf_tensor(const std::string& path, const ModelConfig& m,
                        const std::function<void(const ParamSpec&, const float*)>& fn) {
  const ParameterLayout layout(m);
  const HfTensorFiles files(path);
  check_family(files, m);
  const FileNames name_of(files, m);
  check_tensors(files, name_of, layout);
  // The tied embedding's parameter, which a tied file's lm_head.weight must equal.
  const std::string tied = m.arch == ModelArch::gpt2 ? "wte.weight" : "embed_tokens.weight";
  std::vector<float> tmp, data;
  for (const auto& s : layout.specs()) {
    const std::string name = name_of(s.name);
    const std::vector<int64_t> want = hf_shape(s);
    // The padding rows (after the real ones) stay zero.
    data.assign(static_cast<size_t>(s.numel), 0.f);
    if (!s.hf_transposed) {
      files.read_f32(name, want, data.data());
    } else {
      tmp.resize(static_cast<size_t>(s.numel));
      files.read_f32(name, want, tmp.data());
      transpose(tmp.data(), s.shape[1], s.shape[0], data.data());
    }
    if (s.name == tied && m.tied_embeddings() && files.has("lm_head.weight")) {
      tmp.resize(static_cast<size_t>(hf_numel(s)));
      files.read_f32("lm_head.weight", want, tmp.data());
      for (int64_t i = 0; i < hf_numel(s); ++i)
        if (tmp[static_cast<size_t>(i)] != data[static_cast<size_t>(i)])
          fail("safetensors file '", files.file_of("lm_head.weight"), "': lm_head.weight differs ",
               "from ", name, " at element ", i, "; this model ties the LM head to the embedding");
    }
    fn(s, data.data());
  }
}

std::vector<std::string> save_hf_weights(const std::string& path, const ModelConfig& m,
                                         const ParameterLayout& layout, const float* params,
                                         const std::map<std::string, std::string>& metadata,
                                         int64_t max_shard_bytes, const ByteProgress& on_bytes) {
  GT_CHECK(layout.tp() == 1, "save_hf_weights writes a tp = 1 layout");
  GT_CHECK(max_shard_bytes > 0, "max_shard_bytes ", max_shard_bytes);
  // Tensors in layout order, cut into shards of at most max_shard_bytes (a
  // tensor larger than that is a shard of its own).
  std::vector<std::vector<const ParamSpec*>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& s : layout.specs()) {
    const int64_t bytes = hf_numel(s) * static_cast<int64_t>(sizeof(float));
    if (in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&s);
    in_shard += bytes;
    total += bytes;
  }
  uint64_t bytes_done = 0;  // data bytes of the shards written so far
  auto write_shard = [&](const std::vector<const ParamSpec*>& specs, const std::string& file) {
    SafetensorsWriter writer;
    std::vector<float> tmp;
    for (const ParamSpec* s : specs) {
      const float* src = params + s->offset;
      const std::string name = hf_tensor_name(m, s->name);
      if (!s->hf_transposed) {
        writer.add_f32(name, hf_shape(*s), src);  // the real rows come first
        continue;
      }
      tmp.resize(static_cast<size_t>(s->numel));
      transpose(src, s->shape[0], s->shape[1], tmp.data());
      writer.add_f32(name, hf_shape(*s), tmp.data());
    }
    writer.set_metadata("format", "pt");
    for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
    // The shards' bytes add up to the export's total.
    const uint64_t before = bytes_done;
    writer.write_atomic(file, [&](uint64_t done, uint64_t) {
      if (on_bytes) on_bytes(before + done, static_cast<uint64_t>(total));
    });
    for (const ParamSpec* s : specs) bytes_done += hf_numel(*s) * sizeof(float);
  };
  if (shards.size() == 1) {
    write_shard(shards.front(), path);
    return {path};
  }
  const std::string dir = parent_dir(path);
  const size_t n = shards.size();
  std::vector<std::string> written;
  nlohmann::json index;
  index["metadata"] = {{"total_size", total}};
  for (size_t i = 0; i < n; ++i) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    write_shard(shards[i], dir + "/" + file);
    written.push_back(dir + "/" + file);
    for (const ParamSpec* s : shards[i]) index["weight_map"][hf_tensor_name(m, s->name)] = file;
  }
  const std::string index_path = dir + "/model.safetensors.index.json";
  write_file_atomic(index_path, index.dump(2) + "\n");
  written.push_back(index_path);
  return written;
}

}  // namespace gt
