// GPT: the GPT-2 forward and backward pass, written once against the
// backend-neutral Ops interface. It owns the flat parameter and gradient
// buffers (ParameterLayout order) and the activations of one micro-batch.
//
// Invariants:
//   * forward() with targets and grad_scale > 0 leaves d(loss)/d(logits)
//     (scaled by grad_scale) in place of the logits, ready for backward().
//   * backward() ACCUMULATES into grads(), so micro-batches of one optimizer
//     step simply call forward/backward in turn; zero_grads() starts a step.
//   * Activation buffers are sized for (max_rows, max_seq) at construction
//     and reused; smaller (B, T) views of them are contiguous too.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "kernels/ops.hpp"
#include "trainer/config/config.hpp"
#include "trainer/model/parameter_layout.hpp"

namespace gt {

class GPT {
 public:
  GPT(const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq);

  const ModelConfig& config() const { return cfg_; }
  const ParameterLayout& layout() const { return layout_; }
  int64_t num_parameters() const;  // unpadded count, wte counted once (tied)

  float* params() { return params_.f32(); }
  float* grads() { return grads_.f32(); }
  TensorView param(const std::string& name);  // view of one parameter
  TensorView flat_params() { return cpu_f32(params_.f32(), {layout_.total()}); }
  TensorView flat_grads() { return cpu_f32(grads_.f32(), {layout_.total()}); }

  // tokens, targets: (B, T) int32 host arrays; targets may be null (then no
  // loss is computed and logits() holds the logits). Returns the mean loss
  // over the B*T positions (0 without targets). grad_scale > 0 prepares
  // backward(): dlogits = (softmax - onehot) * grad_scale.
  float forward(const int32_t* tokens, const int32_t* targets, int B, int T, float grad_scale);
  void backward();
  void zero_grads();

  // (B, T, V) logits of the last forward() without a backward pending.
  const float* logits() const { return acts_.logits.f32(); }
  // Per-position losses (B*T) of the last forward() with targets.
  const float* losses() const { return acts_.losses.f32(); }

 private:
  struct Activations {
    HostBuffer tokens, targets;                 // (B,T) int32
    HostBuffer encoded;                         // (B,T,C)
    HostBuffer ln1, ln1_mean, ln1_rstd;         // (L,B,T,C), (L,B,T) x2
    HostBuffer qkv;                             // (L,B,T,3C)
    HostBuffer atty;                            // (L,B,T,C)
    HostBuffer att;                             // (L,B,NH,T,T)
    HostBuffer res2;                            // (L,B,T,C)
    HostBuffer ln2, ln2_mean, ln2_rstd;         // (L,B,T,C), (L,B,T) x2
    HostBuffer fch, fch_gelu;                   // (L,B,T,4C) x2
    HostBuffer res3;                            // (L,B,T,C)
    HostBuffer lnf, lnf_mean, lnf_rstd;         // (B,T,C), (B,T) x2
    HostBuffer logits;                          // (B,T,V)
    HostBuffer losses;                          // (B,T)
    HostBuffer proj_tmp;                        // (B,T,C) matmul output before the residual add
  };
  struct Gradients {  // activation gradients, reused across layers
    HostBuffer dresidual, dln, datty, dfch_gelu, dfch;  // (B,T,C) x3, (B,T,4C) x2
    HostBuffer dqkv;                                    // (B,T,3C)
    HostBuffer datt;                                    // (B,NH,T,T)
  };

  TensorView layer_act(const HostBuffer& buf, int layer, std::initializer_list<int64_t> shape);

  ModelConfig cfg_;
  Ops& ops_;
  ParameterLayout layout_;
  int max_rows_, max_seq_;
  HostBuffer params_, grads_;
  Activations acts_;
  Gradients dacts_;
  int B_ = 0, T_ = 0;
  bool backward_ready_ = false;
};

}  // namespace gt
