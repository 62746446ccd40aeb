#include "trainer/model/hf_config.hpp"

#include "trainer/io/atomic_file.hpp"

namespace gt {

nlohmann::json hf_config_json(const ModelConfig& m) {
  nlohmann::json j;
  if (m.arch == ModelArch::gpt2) {
    // GPT-2's names; its MLP is 4C (n_inner null) with the tanh GELU.
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", m.vocab_size},
         {"n_positions", m.block_size},
         {"n_ctx", m.block_size},
         {"n_embd", m.n_embd},
         {"n_layer", m.n_layer},
         {"n_head", m.n_head},
         {"n_inner", nullptr},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", 1e-5},
         {"initializer_range", 0.02},
         {"tie_word_embeddings", true}};
  } else {
    // The Llama family's keys, shared by transformers' LlamaConfig and
    // MixtralConfig.
    const bool moe = m.moe();
    j = {{"architectures", {moe ? "MixtralForCausalLM" : "LlamaForCausalLM"}},
         {"model_type", moe ? "mixtral" : "llama"},
         {"vocab_size", m.vocab_size},
         {"max_position_embeddings", m.block_size},
         {"hidden_size", m.n_embd},
         {"intermediate_size", m.ffn_width()},
         {"num_hidden_layers", m.n_layer},
         {"num_attention_heads", m.n_head},
         {"num_key_value_heads", m.kv_heads()},
         {"head_dim", m.head_size()},
         {"hidden_act", "silu"},
         {"rms_norm_eps", m.norm_eps},
         {"rope_theta", m.rope_theta},
         {"initializer_range", 0.02},
         {"tie_word_embeddings", m.tied_embeddings()}};
    if (moe) {
      // MixtralConfig: the loss is the cross-entropy alone
      // (output_router_logits false), as ours reports it.
      j["sliding_window"] = nullptr;
      j["attention_dropout"] = 0.0;
      j["num_local_experts"] = m.n_experts;
      j["num_experts_per_tok"] = m.experts_per_token;
      j["output_router_logits"] = false;
      j["router_aux_loss_coef"] = m.router_aux_loss_coef;
      j["router_jitter_noise"] = 0.0;
    } else {
      j["rope_scaling"] = nullptr;
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
      const RopeScaling& rs = m.rope_scaling;  // refused for mixtral (config.cpp)
      if (rs.enabled())
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", rs.factor},
                             {"low_freq_factor", rs.low_freq_factor},
                             {"high_freq_factor", rs.high_freq_factor},
                             {"original_max_position_embeddings", rs.original_max_position}};
    }
  }
  j["torch_dtype"] = "float32";
  return j;
}

std::string write_hf_config(const std::string& dir, const ModelConfig& m) {
  const std::string path = dir + "/config.json";
  write_file_atomic(path, hf_config_json(m).dump(2) + "\n");
  return path;
}

}  // namespace gt
