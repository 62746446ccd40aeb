#include "trainer/checkpoint/hf_export.hpp"

#include <vector>

#include "trainer/io/atomic_file.hpp"
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
  const CheckpointMeta meta =
      load_checkpoint(checkpoint_dir, model_signature(m), whole_tensor_pieces(whole));
  metadata.emplace("step", std::to_string(meta.step));
  save_hf_weights(out_path, m, layout, params.data(), metadata);
  write_hf_config(parent_dir(out_path), m);
  return meta;
}

}  // namespace gt
