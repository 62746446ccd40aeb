#include "trainer/model/hf_weights.hpp"

#include <algorithm>
#include <vector>

#include "kernels/core/error.hpp"
#include "trainer/io/safetensors.hpp"

namespace gt {

namespace {
// The tensor's shape in an HF file: padding rows left out (wte holds the
// true vocabulary), Conv1D weights transposed.
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
}  // namespace

void for_each_hf_tensor(const std::string& path, const ModelConfig& m,
                        const std::function<void(const ParamSpec&, const float*)>& fn) {
  const ParameterLayout layout(m);
  SafetensorsReader reader(path);
  const bool prefixed = !reader.has("wte.weight") && reader.has("transformer.wte.weight");
  const std::string prefix = prefixed ? "transformer." : "";
  std::vector<float> tmp, data;
  for (const auto& s : layout.specs()) {
    const std::string name = prefix + s.name;
    // A 2-D weight stored the other way round (torch Linear [out, in] instead
    // of HF GPT-2's Conv1D [in, out], or the reverse) is named as such.
    const std::vector<int64_t> want = hf_shape(s);
    if (want.size() == 2 && want[0] != want[1] && reader.has(name) &&
        reader.info(name).shape == std::vector<int64_t>{want[1], want[0]})
      fail("tensor ", name, " (", path, "): expected shape [", want[0], ", ", want[1],
           "] (", s.hf_transposed ? "HF GPT-2 Conv1D layout [in, out]" : "[out, in]",
           "), got [", want[1], ", ", want[0], "]: the weight is stored transposed");
    // The padding rows (after the real ones) stay zero.
    data.assign(static_cast<size_t>(s.numel), 0.f);
    if (!s.hf_transposed) {
      reader.read_f32(name, want, data.data());
    } else {
      tmp.resize(static_cast<size_t>(s.numel));
      reader.read_f32(name, hf_shape(s), tmp.data());
      transpose(tmp.data(), s.shape[1], s.shape[0], data.data());
    }
    if (s.name == "wte.weight" && reader.has("lm_head.weight")) {
      tmp.resize(static_cast<size_t>(hf_numel(s)));
      reader.read_f32("lm_head.weight", want, tmp.data());
      for (int64_t i = 0; i < hf_numel(s); ++i)
        if (tmp[static_cast<size_t>(i)] != data[static_cast<size_t>(i)])
          fail("safetensors file '", path, "': lm_head.weight differs from ", prefix,
               "wte.weight at element ", i, "; this trainer ties the LM head to the embedding");
    }
    fn(s, data.data());
  }
}

void save_hf_weights(const std::string& path, const ParameterLayout& layout, const float* params,
                     const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter writer;
  std::vector<float> tmp;
  for (const auto& s : layout.specs()) {
    const float* src = params + s.offset;
    if (!s.hf_transposed) {
      writer.add_f32(s.name, hf_shape(s), src);  // the real rows come first
      continue;
    }
    tmp.resize(static_cast<size_t>(s.numel));
    transpose(src, s.shape[0], s.shape[1], tmp.data());
    writer.add_f32(s.name, hf_shape(s), tmp.data());
  }
  writer.set_metadata("format", "pt");
  for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
  writer.write_atomic(path);
}

}  // namespace gt
