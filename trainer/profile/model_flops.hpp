// The model FLOPs of a training step, the numerator of MFU, counted
// independently of the profiler (from the config alone) so the two can be
// checked against each other. The same formula for every model family:
//
//   FLOPs per token = 6·N + 12·L·T·C
//
// N counts the weights of every matmul: L blocks' (block_matmuls(), by
// role) plus the LM head's V·C (GPT-2's head reuses wte's storage, Llama's
// is lm_head.weight unless tied: either way it is a full matmul of its own).
// Per block:
//   gpt2   c_attn 3C², attn.c_proj C², mlp.c_fc 4C², mlp.c_proj 4C²: 12·C²
//   llama  q_proj C·Q, k_proj and v_proj C·K each, o_proj Q·C, gate_proj and
//          up_proj C·F each, down_proj F·C: C·(Q + 2K) + Q·C + 3·C·F, with
//          Q = n_head·hs query features (= C), K = n_kv_head·hs (grouped-query
//          attention makes k and v narrower) and F the MLP width.
//   mixtral  as llama, with the MLP's the weights a token is routed
//          through (active parameters, as Megatron and DeepSeek count a
//          mixture's FLOPs): k experts' gate, up and down, 3·k·C·F, plus
//          the router's E·C (computed in fp32, a matmul all the same).
// Each such weight costs 2 FLOPs per token forward and 4 backward (dinp and
// dweight): 6·N. Biases, norms and the position embedding are not matmuls
// and are left out (GPT-2: about 13·L·C + 2·C parameters; Llama: 2·L·C + C;
// well under 1% of N), as is the token lookup, RoPE and SwiGLU.
// Attention (PaLM appendix B, Megatron): Q·K^T and P·V cost 2·T·C each per
// token per layer forward over the full T x T, and twice that backward: 12·L·T·C
// per token, C = n_head·hs: every query head computes its own products, so
// sharing key/value heads (GQA) saves none of them. Not halved for causality:
// the convention every published MFU uses, and what op_costs.hpp counts per op.
#pragma once

#include <cstdint>

#include "trainer/config/config.hpp"

namespace gt {

// The weights of one block's matmuls, by role in the tensor-parallel block
// both families share (trainer/parallelize/tp_layers.hpp): two
// column-parallel layers (qkv, up) and two row-parallel ones (out, down).
struct BlockMatmuls {
  double qkv = 0;   // c_attn | q_proj, k_proj, v_proj
  double out = 0;   // attn.c_proj | o_proj
  double up = 0;    // mlp.c_fc | gate_proj, up_proj
  double down = 0;  // mlp.c_proj | down_proj
  double router = 0;  // mixtral: block_sparse_moe.gate (E·C)
  double total() const { return qkv + out + up + down + router; }
};
BlockMatmuls block_matmuls(const ModelConfig& m);

struct ModelFlops {
  double matmul_params = 0;        // N
  double dense_per_token = 0;      // 6·N
  double attention_per_token = 0;  // 12·L·T·C
  double per_token() const { return dense_per_token + attention_per_token; }
};

ModelFlops model_flops(const ModelConfig& m, int seq_len);

// How an MFU is quoted: its FLOPs per token and its peak, by name, so a
// figure compares with Megatron's, torchtitan's and llm.c's.
//   palm  6N + 12·L·T·C, N the matmul weights (model_flops above: PaLM's
//         appendix B, Megatron's and torchtitan's count). The headline.
//   llmc  llm.c's (train_gpt2.cu, gpt2_estimate_mfu): 6P + 6·L·C·T, P every
//         parameter (embeddings, norms and biases included), attention
//         halved for causality. Quoted beside it for GPT-2 only, the
//         family llm.c trains.
enum class MfuFormula { palm, llmc };
const char* mfu_formula_name(MfuFormula f);  // "PaLM 6N+12LTC", "llm.c 6P+6LCT"
// FLOPs per token by `f`; llmc's P counted by ParameterLayout, as the model
// holds them.
double mfu_flops_per_token(const ModelConfig& m, int seq_len, MfuFormula f);

}  // namespace gt
