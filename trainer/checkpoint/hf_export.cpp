#include "trainer/checkpoint/hf_export.hpp"

#include <vector>

#include "trainer/io/atomic_file.hpp"
#include "trainer/io/progress.hpp"
#include "trainer/model/hf_config.hpp"
#include "trainer/model/hf_weights.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

CheckpointMeta export_hf_weights(const std::string& checkpoint_dir, const ModelConfig& m,
                                 const std::string& out_path,
                                 std::map<std::string, std::string> metadata) {
  const ParameterLayout layout(m);
  std::vector<float> params(static_cast<size_t>(layout.total()), 0.f);
  std::vector<NamedTensor> whole;
  for (const auto& s : layout.specs())
    whole.push_back({"param." + s.name, s.saved_shape(), params.data() + s.offset, s.pad_rows > 0});
  // Two progress lines where the export takes long: reading the pieces, then
  // writing the files (the shared format, trainer/io/progress.hpp).
  ByteProgressLine reading("export read");
  const CheckpointMeta meta = load_checkpoint(checkpoint_dir, model_signature(m),
                                              whole_tensor_pieces(whole), reading.callback());
  reading.finish();
  metadata.emplace("step", std::to_string(meta.step));
  // `--out out/model.safetensors` into a folder that does not exist yet.
  make_parent_dir(out_path, "export --out");
  ByteProgressLine writing("export write");
  save_hf_weights(out_path, m, layout, params.data(), metadata, kHfMaxShardBytes,
                  writing.callback());
  writing.finish();
  write_hf_config(parent_dir(out_path), m);
  return meta;
}

}  // namespace gt
