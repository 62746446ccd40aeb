// The backend-neutral op interface. The model (trainer/model) is written
// once against this class; the CPU backend (kernels/cpu) implements it with
// BLAS sgemm and OpenMP loops, the CUDA backend (kernels/cuda) with cuBLASLt
// and our own kernels.
//
// Invariants every backend keeps (llm.c's convention, stated once here):
//   * Parameter gradients ACCUMULATE (+=) so gradient accumulation over
//     micro-batches needs no extra buffer; the trainer zeroes them per step.
//   * Activation gradients named d<inp> are ASSIGNED (=), except where the
//     signature says "accumulates" (residual streams).
//   * Linear weights are stored (out_features, in_features) like
//     torch.nn.Linear: out = inp @ weight^T + bias.
//   * All tensors are contiguous unless a comment says otherwise.
//
// bf16 storage (runtime.dtype=bf16, the model's activations): the ops marked
// "bf16 storage" below also take their activation tensors in bf16. Math is
// fp32 either way: bf16 inputs are widened exactly, bf16 outputs are the fp32
// results rounded to nearest even once. Parameters, their gradients, and
// saved statistics (LayerNorm mean/rstd, attention's saved rows) stay fp32,
// as does every output that ACCUMULATES (rounding an accumulator each time
// would lose the small terms). The CPU backend is bit for bit its fp32 op on
// the bf16 values, then rounded; the CUDA kernels are tested against it.
//
// Entry points (Communicator's shape): every op is a public non-virtual
// method that checks the backend-neutral contract once (the shapes stated
// below and their relations: ranks, extents, heads dividing C, runs inside
// their buffers), tells the observer (kernels/op_observer.hpp: the profiler)
// and then calls the backend's protected virtual do_<op>. What a backend
// checks itself is how it stores tensors: their device, dtypes (which differ
// between backends, see each op) and contiguity, and limits of its own
// kernels. Adding an op touches this class, each backend and their tests.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/adamw_runs.hpp"
#include "kernels/core/buffer.hpp"
#include "kernels/core/fp8.hpp"
#include "kernels/core/tensor.hpp"
#include "kernels/op_observer.hpp"
#include "kernels/op_timer.hpp"

namespace gt {

// What fp8_amax reduces over: the whole (R, C) tensor, each row or each
// column.
enum class Fp8Reduce { tensor, rows, cols };
const char* fp8_reduce_name(Fp8Reduce r);

// How fp8_matmul reads and combines its operands (see there).
struct Fp8MatmulSpec {
  Fp8Format a_format = Fp8Format::e4m3, b_format = Fp8Format::e4m3;
  bool a_transposed = false, b_transposed = false;
  bool accumulate = false;  // out += (the weight gradient); else out =
  // cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM (Hopper's fp8 tensor cores
  // then add partial sums in reduced precision). A speed hint: the CPU
  // backend always accumulates in fp32.
  bool fast_accum = false;
};

class Ops {
 public:
  Ops() = default;
  virtual ~Ops() = default;
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  virtual Device device() const = 0;
  // "CpuOps", "CudaOps": what the entry points' argument errors start with
  // ("CudaOps::matmul_forward: weight must be (3, 8), got (3, 7)").
  virtual const char* backend_name() const = 0;

  // Every op called from now on is reported to `observer` (a profiler);
  // null detaches. Not owned. What an entry point adds to the backend's call
  // (its shape checks, the OpCall on the stack, the begin_op/end_op calls,
  // one branch for the observer) is host work of nanoseconds, against the
  // microseconds of a kernel launch.
  void set_observer(OpObserver* observer) { observer_ = observer; }
  OpObserver* observer() const { return observer_; }

  // ---- Memory: where every tensor the model touches lives -------------------
  // `bytes` of this backend's memory (host for the CPU, device for CUDA),
  // zero-filled. For setup only: a training step never allocates.
  virtual Buffer allocate(size_t bytes) = 0;
  // dst (this backend's memory, contiguous) = dst.numel() elements from
  // `host`; `host` may be reused once it returns. Ordered like an op: it
  // need not wait for the ops before it (CUDA stages small uploads through
  // pinned memory and queues the copy).
  virtual void upload(TensorView dst, const void* host) = 0;
  // host = src (contiguous), after every op enqueued before that writes src.
  virtual void download(void* host, TensorView src) = 0;
  // Returns once every op enqueued so far has finished (step timing). A no-op
  // where ops are synchronous (the CPU backend).
  virtual void synchronize() {}
  // Bytes this backend allocated on its device (Buffers and its own
  // workspaces), now and at most since construction. 0 for a backend whose
  // memory is the process's host memory: its peak is the process's RSS.
  virtual int64_t device_bytes_in_use() const { return 0; }
  virtual int64_t device_bytes_peak() const { return 0; }
  // How the profiler times this backend's ops (kernels/op_timer.hpp): null
  // where ops are synchronous, so the host's steady clock times them right.
  virtual std::unique_ptr<OpTimer> make_op_timer() const { return nullptr; }

  // out (B,T,C) = wte[tokens[b,t]] + wpe[t].  tokens (B,T) int32, wte (V,C), wpe (maxT,C).
  void embedding_forward(TensorView out, TensorView tokens, TensorView wte, TensorView wpe);
  // dwte (V,C) += scatter of dout by token, dwpe (maxT,C) += sum over batch. dout (B,T,C).
  void embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout, TensorView tokens);

  // The two halves of embedding_forward/backward, for the vocab-parallel
  // embedding of tensor parallelism (the token part is summed over the tp
  // ranks before the position part is added to the sequence shard).
  // out (N,C) = wte[tokens[i] - vocab_start] when that row is in this shard
  // [vocab_start, vocab_start + V_shard), else 0. tokens (N) int32, wte (V_shard,C).
  void token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                               int64_t vocab_start);
  // dwte (V_shard,C) += scatter of dout (N,C) rows whose token is in this shard.
  void token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                int64_t vocab_start);
  // out (N,C) += wpe[(first_row + i) % T] for row i: rows of a (B,T) batch
  // flattened, starting at global row first_row.
  void position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row, int T);
  // dwpe (maxT,C) += dout rows at their positions (first_row + i) % T.
  void position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row, int T);

  // Row amaxes for an fp8 GEMM's input, taken by the op that writes it
  // (runtime.fp8: the producer, not an extra pass over the tensor). An op
  // given row_amax (R) fp32 (it may be empty: none taken) also ASSIGNS
  // row_amax[r] = max |out[r, :]| over the values AS STORED (bf16-rounded
  // for a bf16 out; rounding is monotone and odd, so that is the fp32
  // maximum rounded the same way); a NaN in a row makes its amax NaN. The
  // layernorm_forward, add_layernorm_forward, rmsnorm_forward,
  // add_rmsnorm_forward, swiglu_forward and gelu_forward entries take one;
  // gelu's out is then (R, C). So do the gradients' producers
  // layernorm_backward and rmsnorm_backward (of dinp after it accumulates,
  // of dinp_bf16's values when given), swiglu_backward (of dgu) and
  // gelu_backward (of dinp; (R, C) as gelu_forward's).
  //
  // Row-wise LayerNorm, eps 1e-5 (PyTorch default), biased variance.
  // out (R,C), mean (R), rstd (R) saved for backward; inp (R,C); weight, bias (C).
  // bf16 storage: inp and out bf16 together (weight, bias, mean, rstd fp32).
  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                         TensorView weight, TensorView bias, TensorView row_amax = {});
  // The residual add fused in front: res (R,C) = a + b (rounded to the
  // storage dtype, as add), then out, mean, rstd = layernorm_forward of res.
  // The same function as add then layernorm_forward; a, b, res and out are
  // all fp32 or all bf16.
  void add_layernorm_forward(TensorView res, TensorView out, TensorView mean, TensorView rstd,
                             TensorView a, TensorView b, TensorView weight, TensorView bias,
                             TensorView row_amax = {});
  // dinp (R,C) ACCUMULATES (it is the residual stream's gradient);
  // dweight, dbias (C) accumulate. bf16 storage: inp and dout may each be
  // bf16 (every output stays fp32: they are gradients the residual stream
  // and the optimizer sum). dinp_bf16, unless empty: (R,C) bf16, ASSIGNED
  // the accumulated dinp rounded to nearest even, in the same pass (the next
  // GEMM's operand, so that nobody casts dinp again). row_amax: the row
  // amaxes of dinp after the add, of dinp_bf16's values when given (what the
  // next GEMM reads); see "Row amaxes for an fp8 GEMM's input".
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                          TensorView inp, TensorView weight, TensorView mean, TensorView rstd,
                          TensorView dinp_bf16, TensorView row_amax = {});

  // Mixed precision: inp, weight (and dout in backward) may all be bf16
  // together; dweight, dbias stay fp32 and the products accumulate in fp32
  // (every backend accepts this; CudaOps accepts more, see cuda_ops.hpp).
  // The result is then the fp32 matmul of the bf16 values; with bf16 inputs
  // `out` and `dinp` may be bf16 too (bf16 storage: that result rounded to
  // nearest even), and with a bf16 out the bias may be bf16 (added as its
  // value in fp32 before the rounding; bf16 storage's models pass one).
  // out (R,OC) = inp (R,C) @ weight(OC,C)^T + bias(OC); bias may be empty().
  void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias);
  // dinp (R,C) assigned (skipped when empty()), dweight (OC,C) and dbias (OC)
  // accumulate (dbias skipped when empty()).
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                       TensorView inp, TensorView weight);

  // The MLP's first linear layer with its GELU, in one op (on CUDA, the
  // GEMM's GELU epilogue: the (R, OC) product is written once, not read back):
  //   pre (R,OC) = inp (R,C) @ weight(OC,C)^T + bias(OC)   (bias may be empty())
  //   out (R,OC) = gelu(pre)
  // pre is what the backward needs (GELU's input). dtypes as matmul_forward's,
  // out and pre sharing one: in bf16 each is the fp32 value rounded once, and
  // out is gelu of the unrounded pre.
  void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                           TensorView bias);
  // matmul_backward of the MLP's second linear layer, whose input was
  // gelu(pre), with GELU's backward folded into the input gradient:
  //   dinp (R,C) = (dout @ weight) * gelu'(pre)   assigned, rounded once
  // pre (R,C) is the first layer's `pre` (matmul_gelu_forward), dinp's dtype;
  // dweight and dbias accumulate as in matmul_backward.
  void matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                             TensorView inp, TensorView weight, TensorView pre);

  // out (R,C) += bias (C) on every row.
  void add_bias(TensorView out, TensorView bias);
  // dbias (OC) += the column sums of dout (R,OC) (fp32 or bf16), summed in
  // fp32: matmul_backward's bias gradient alone (for the fp8 path, whose
  // GEMMs do not compute it).
  void bias_backward(TensorView dbias, TensorView dout);

  // ---- fp8 GEMMs (runtime.fp8; formats and rounding: kernels/core/fp8.hpp) ----
  // amax (fp32) ASSIGNED the largest |x| of x (R,C) (fp32 or bf16): over the
  // whole tensor (amax (1)), each row (amax (R)) or each column (amax (C)).
  // A NaN anywhere in its slice makes that amax NaN (a non-finite step,
  // which the trainer skips).
  void fp8_amax(TensorView amax, TensorView x, Fp8Reduce over);
  // scale (n) fp32 ASSIGNED format max / max(amax, 1e-12) from amax (n) fp32,
  // rounded down to a power of two when pow2 (torchao's amax_to_scale and
  // round_scales_to_power_of_2; kernels/cpu/fp8_kernels.hpp). scale may be
  // amax itself (in place).
  void fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format, bool pow2);
  // The scaled fp8 GEMM, quantising casts included:
  //   out (M,N) = or += (Qa Qb^T) x (1/sa) x (1/sb) + bias (N)
  // where op(a) is a (M,K), or a (K,M) read transposed when
  // spec.a_transposed, op(b) is b (N,K), or (K,N) read transposed, and
  // Qa = fp8(op(a) x sa) in spec.a_format, rounded to nearest even and
  // saturated to the format's largest finite value (likewise Qb).
  // a_scale (1): one scale for op(a); (M): one per row of op(a); b_scale (1)
  // or (N). a, b fp32 or bf16; products accumulate in fp32; out fp32 or bf16
  // (rounded once, after the bias, which is fp32 or bf16 and may be
  // empty()). spec.accumulate: out fp32 and added to, bias empty.
  // b may also be fp8 codes (u8) already quantised: b = fp8(op(b)' x sb) in
  // spec.b_format (a weight quantised on its shard and all-gathered in fp8,
  // parallel.fp8_allgather); then it is read as it is, never requantised,
  // and b_scale is the scale it was quantised with.
  void fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                  TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec);
  // q (u8, any shape) ASSIGNED fp8(x x scale) in `format`, x (fp32 or bf16,
  // the same number of elements) and scale (1) fp32: the quantising cast of
  // fp8_matmul on its own, rounded to nearest even and saturated.
  void fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format);

  // Causal multi-head self-attention with 1/sqrt(head_dim) scaling.
  // qkv (B,T,3C) laid out [q | k | v] along the last dim, head h using columns
  // [h*hs, (h+1)*hs) of each part (the HF GPT-2 c_attn split).
  // out (B,T,C) with heads concatenated. `saved` (1-D, attention_saved_elems
  // floats) is whatever the backend keeps for backward: the CPU backend the
  // (B,NH,T,T) softmax probabilities, a flash-style GPU kernel the (B,NH,T)
  // log-sum-exp, so the model never assumes the T x T matrix exists.
  // dtypes (both backends): qkv and out, and in backward dqkv, dout, qkv and
  // out, are all fp32 or all bf16 (a mix is an error naming the op and the
  // tensor); saved and scratch are fp32 either way. bf16 inputs are widened
  // exactly, the math is fp32, and bf16 outputs are the fp32 results rounded
  // to nearest even. The CPU backend is bit for bit its fp32 attention of the
  // bf16 values, then rounded (the reference CudaOps is tested against); the
  // CUDA tensor-core variant (runtime.attention, the default in bf16) also
  // rounds P and dS to bf16 before their products.
  virtual int64_t attention_saved_elems(int B, int n_head, int T) const = 0;
  // Grouped-query attention (Llama): n_kv_head < n_head key/value heads, qkv
  // (B,T,(NH + 2 KV) hs) packing the q heads, then the k heads, then the v
  // heads; q head h reads kv head h / (NH / KV) (HF's repeat_kv). n_kv_head 0
  // means n_head (the layout above). saved and scratch are sized per query
  // head as above.
  void attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                         int n_kv_head = 0);
  // dqkv (qkv's shape) assigned. out and saved are the forward's. scratch (1-D,
  // attention_scratch_elems floats) is workspace the backend may clobber.
  virtual int64_t attention_scratch_elems(int B, int n_head, int T) const = 0;
  void attention_backward(TensorView dqkv, TensorView scratch, TensorView dout, TensorView qkv,
                          TensorView out, TensorView saved, int n_head, int n_kv_head = 0);

  // ---- Attention over blocks (context parallelism) ----
  // Causal attention cut into blocks of queries and blocks of keys, each at
  // its global positions, for sequences split across ranks
  // (trainer/parallelize/context_parallel.hpp): query row i of a block sits
  // at position q_pos + i, key row j at k_pos + j, and query i sees key j
  // iff k_pos + j <= q_pos + i. Query head h reads key/value head
  // h / (NH / KV) (n_kv_head 0 means n_head); scores are scaled by
  // 1/sqrt(hs). Every tensor is 3-D with its last dimension contiguous and
  // its first two strided as they come, so a block can be a slice of a
  // packed qkv row or one chunk of a longer sequence, nothing copied:
  //   q, dout     (B, Tq, NH hs)   fp32 or bf16: q, k, v and dout share one dtype
  //   k, v        (B, Tk, KV hs)
  //   out         (B, Tq, NH hs)   fp32 (partial results merge in fp32)
  //   lse, delta  (B, NH, Tq)      fp32
  //   dq          (B, Tq, NH hs)   fp32;   dk, dv (B, Tk, KV hs) fp32
  // scratch (1-D, attention_block_scratch_elems floats) is workspace the
  // backend may clobber.
  //
  // forward: the block's attention over the keys each query sees, and its
  // log-sum-exp (natural log). A query that sees none of the block's keys
  // gets out 0 and lse -inf. accumulate false: out and lse ASSIGNED.
  // accumulate true: out and lse hold the same queries' attention over other
  // keys (lse -inf where there was none) and become the attention over both,
  // merged in fp32 in the stable form, with m = max(lse, lse_b):
  //   lse' = m + log(e^(lse - m) + e^(lse_b - m)),
  //   out' = out e^(lse - lse') + out_b e^(lse_b - lse').
  virtual int64_t attention_block_scratch_elems(int B, int n_head, int Tq, int Tk) const = 0;
  void attention_block_forward(TensorView out, TensorView lse, TensorView scratch, TensorView q,
                               TensorView k, TensorView v, int64_t q_pos, int64_t k_pos,
                               int n_head, int n_kv_head, bool accumulate);
  // backward: the block's share of the gradients, given lse and delta of the
  // queries' GLOBAL output (merged over every key block they see; delta from
  // attention_row_dot), never the block's own: P = exp(S - lse) on the keys
  // each query sees (0 elsewhere), dS = P o (dout v^T - delta), and
  //   dq += dS k / sqrt(hs),  dk += dS^T q / sqrt(hs),  dv += P^T dout,
  // all three ACCUMULATED in fp32 (dk and dv of a key/value head sum over
  // its group's query heads, in head order).
  void attention_block_backward(TensorView dq, TensorView dk, TensorView dv, TensorView scratch,
                                TensorView dout, TensorView q, TensorView k, TensorView v,
                                TensorView lse, TensorView delta, int64_t q_pos, int64_t k_pos,
                                int n_head, int n_kv_head);
  // delta (B, NH, T) fp32 ASSIGNED: for each query head and row, the sum over
  // the head's hs columns of dout o out (the backward's D = rowsum(dO o O)).
  // dout and out (B, T, NH hs), each fp32 or bf16, strided as above.
  void attention_row_dot(TensorView delta, TensorView dout, TensorView out, int n_head);

  // tanh-approximate GELU (torch.nn.GELU(approximate="tanh")), elementwise on
  // any shape. bf16 storage: every tensor of a call bf16.
  void gelu_forward(TensorView out, TensorView inp, TensorView row_amax = {});
  // dinp assigned = dout * gelu'(inp).
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout, TensorView row_amax = {});

  // out = a + b, elementwise, same shape; out may alias a or b. bf16
  // storage: all three bf16 (the residual adds).
  void add(TensorView out, TensorView a, TensorView b);
  // acc += x, elementwise, same shape.
  void accumulate(TensorView acc, TensorView x);
  // t = 0.
  void zero(TensorView t);
  // dst = src (same shape, same device).
  void copy(TensorView dst, TensorView src);
  // dst = src converted to dst's dtype, elementwise; same shape, both
  // contiguous, fp32 or bf16, not overlapping:
  //   fp32 -> bf16  round to nearest, ties to even; past the largest bf16 ->
  //                 +-inf; subnormals kept; every NaN -> the canonical bf16
  //                 NaN 0x7FFF (kernels/core/bf16.hpp, bit for bit CUDA's
  //                 __float2bfloat16_rn)
  //   bf16 -> fp32  exact
  //   same dtype    a copy
  // The bf16 copies of fp32 weights and activations that mixed precision
  // feeds to the GEMMs.
  void cast(TensorView dst, TensorView src);
  // cast between 2-D (rows, cols) views whose rows may be strided (strides
  // (ld, 1), ld >= cols): columns moved out of or into wider rows (the
  // key/value columns of a packed qkv), converted as cast converts. dst and
  // src do not overlap.
  void cast_rows(TensorView dst, TensorView src);

  // Padded vocabulary: the logits may have more columns than the vocabulary
  // has rows (the model pads it to a multiple of 128, trainer/model). Column
  // j of a logits block holding vocabulary rows [vocab_start, ...) is padding
  // when vocab_start + j >= vocab_size: it is left out of every max and sum
  // (as if its logit were -inf) and its dlogits are 0, so the loss and the
  // gradients are those of the unpadded vocabulary.
  //
  // logits and dlogits (all four ops) are both fp32 or both bf16 (the bf16
  // model's logits): bf16 is widened exactly, the math is fp32, and bf16
  // dlogits are the fp32 gradient rounded to nearest even.
  //
  // Fused softmax cross-entropy over logits (R,Vp) with int32 targets (R) in
  // [0, vocab_size), vocab_size <= Vp. losses (R) = -log softmax(logits)[target].
  // When dlogits is not empty() it is written (it may alias logits) with
  // (softmax - onehot) * grad_scale, so the caller folds the 1/(rows) of the
  // mean loss and the gradient accumulation into grad_scale.
  void softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                             TensorView targets, int64_t vocab_size, float grad_scale);

  // Vocab-parallel softmax cross-entropy (tensor parallelism): each rank holds
  // logits (R,V_shard) for vocabulary rows [vocab_start, vocab_start+V_shard)
  // and the full logits never exist on one rank. The caller combines the
  // per-shard statistics across the tp ranks between the three calls:
  // Padding columns as above (a shard may be padding only: its row_max is -inf).
  //   1. row_max (R) = max over this shard            -> all-reduce max
  //   2. sumexp (R) = sum exp(logits - row_max), target_logit (R) = the
  //      target's logit if it is in this shard else 0  -> all-reduce sum
  //   3. losses (R) = log(sumexp) + row_max - target_logit; when dlogits is
  //      not empty() it is written (it may alias logits) with
  //      (exp(logits - row_max) / sumexp - onehot) * grad_scale.
  void cross_entropy_shard_max(TensorView row_max, TensorView logits, int64_t vocab_start,
                               int64_t vocab_size);
  void cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit, TensorView logits,
                                TensorView targets, TensorView row_max, int64_t vocab_start,
                                int64_t vocab_size);
  void cross_entropy_shard_finish(TensorView losses, TensorView dlogits, TensorView logits,
                                  TensorView targets, TensorView row_max, TensorView sumexp,
                                  TensorView target_logit, int64_t vocab_start, int64_t vocab_size,
                                  float grad_scale);

  // ---- The Llama family ------------------------------------------------------
  // RMSNorm (HF LlamaRMSNorm): out (R,C) = inp * rstd * weight with rstd (R)
  // = 1 / sqrt(mean(inp^2) + eps), saved for backward. bf16 storage: inp and
  // out bf16 together (weight and rstd fp32).
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight,
                       float eps, TensorView row_amax = {});
  // The residual add fused in front: res (R,C) = a + b (rounded to the
  // storage dtype, as add), then out, rstd = rmsnorm_forward of res. The
  // same function as add then rmsnorm_forward; a, b, res and out are all
  // fp32 or all bf16.
  void add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd, TensorView a,
                           TensorView b, TensorView weight, float eps, TensorView row_amax = {});
  // dinp (R,C) ACCUMULATES (the residual stream's gradient), dweight (C)
  // accumulates; dout and inp may each be bf16 (outputs fp32). dinp_bf16,
  // unless empty: (R,C) bf16 ASSIGNED the accumulated dinp rounded to
  // nearest even in the same pass (the row-parallel GEMM's operand, so that
  // nobody casts dinp again); row_amax then holds its values' row amaxes, as
  // layernorm_backward's.
  void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                        TensorView weight, TensorView rstd, TensorView dinp_bf16 = {},
                        TensorView row_amax = {});
  // Rotary embedding, in place, HF's rotate_half convention: qk (N, H, D);
  // row n is at position (first_row + n) % T; heads [0, rot_heads) turn
  // (q and k of a packed q|k|v row), the others are left alone. cos_sin
  // (max_T >= T, D) fp32: row p = [cos(p f_i) for i < D/2 | sin(p f_i)]
  // (trainer/model/rope_table.hpp). For each pair (x_i, x_{i+D/2}):
  //   x_i <- x_i c - x_{i+D/2} s,  x_{i+D/2} <- x_{i+D/2} c + x_i s.
  // bf16 storage: qk bf16. backward applies the transpose (angle -a) to the
  // gradient, in place: the gradient of forward.
  void rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row, int T);
  void rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads, int64_t first_row, int T);
  // SwiGLU: out (R,F) = silu(gate) * up, gu (R,2F) = [gate | up] per row (one
  // GEMM's output). backward: dgu (R,2F) ASSIGNED. bf16 storage: all bf16.
  void swiglu_forward(TensorView out, TensorView gu, TensorView row_amax = {});
  void swiglu_backward(TensorView dgu, TensorView dout, TensorView gu, TensorView row_amax = {});

  // ---- Mixture of experts (the Mixtral family) --------------------------------
  // One MoE layer routes R rows to E experts, k each (N = R k slots), as HF
  // Mixtral: probs = softmax(router logits), the top k experts of each row,
  // their probs renormalised to sum to 1 as the row's combine weights. Slots
  // are sorted by expert into a dispatch buffer of N rows (at most: capacity
  // drops leave its tail unused), each expert's contiguous group of rows
  // [offsets[e], offsets[e+1]) run through that expert's GEMMs (one grouped
  // GEMM per projection), then combined back per row by the weights. Every
  // count and offset stays in this backend's memory (int32), so a step makes
  // no host round trip. Router tensors are fp32; row tensors (inp, out,
  // dispatch buffers and their gradients) are fp32 or bf16 (bf16 storage);
  // index tensors int32.
  //
  // Router: probs (R,E) = softmax(logits (R,E)) per row; lse (R) its
  // log-sum-exp (for the z-loss). topk_expert (R,k) = the k experts with the
  // largest probs + bias (bias (E) may be empty(): DeepSeek-V3's selection
  // bias, it changes only which experts are chosen), in descending order,
  // ties to the lower expert index; topk_weight (R,k) = their probs (without
  // the bias) divided by their sum. All assigned.
  void moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                          TensorView topk_weight, TensorView logits, TensorView bias);
  // dlogits (R,E) ASSIGNED: the gradient through the renormalised top-k
  // weights (dtopk_weight (R,k)), plus dprob_shared (E, may be empty()) added
  // to every row's d(probs) (the load-balancing loss's gradient, the same for
  // every row), through the softmax; plus the router z-loss's
  // z_grad * 2 lse * probs (z_grad: d(loss)/d(lse^2) of each row, 0 = none).
  void moe_router_backward(TensorView dlogits, TensorView dtopk_weight, TensorView probs,
                           TensorView lse, TensorView topk_expert, TensorView topk_weight,
                           TensorView dprob_shared, float z_grad);
  // counts (E) and prob_sums (E), fp32, ACCUMULATE: the rows choosing each
  // expert (over the k slots) and the sum over rows of probs: a layer's
  // share of load_balancing_loss_func's two factors and the load metric.
  void moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                        TensorView topk_expert);
  // The dispatch plan: positions (R,k) int32 = the row of slot (r, j) in the
  // expert-sorted dispatch buffer, -1 when dropped; offsets (E+1) int32 = the
  // start of each expert's group, offsets[E] the rows kept. Within an
  // expert's group slots keep row order (r, then j). capacity 0: dropless;
  // else an expert keeps at most `capacity` slots, dropping those of the
  // lowest topk_weight first, ties dropping the later row first. Assigned.
  void moe_dispatch_plan(TensorView positions, TensorView offsets, TensorView topk_expert,
                         TensorView topk_weight, int64_t capacity);
  // out (N,C) rows at positions = inp (R,C) rows (slot (r, j) gets row r);
  // rows no slot maps to are left as they are. Same dtype.
  void moe_permute(TensorView out, TensorView inp, TensorView positions);
  // dinp (R,C) ASSIGNED = sum over row r's kept slots of dout (N,C) at their
  // positions (0 for a row whose every slot was dropped). Math fp32, rounded once.
  void moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions);
  // out (R,C) ASSIGNED = sum over kept slots j of topk_weight[r,j] *
  // expert_out[positions[r,j]] (fp32 math, rounded once). expert_out (N,C).
  void moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                           TensorView topk_weight);
  // dexpert_out (N,C): rows at kept positions ASSIGNED topk_weight[r,j] *
  // dout[r] (others left); dtopk_weight (R,k) fp32 ASSIGNED the dot of dout[r]
  // and expert_out[positions[r,j]] (0 when dropped).
  void moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight, TensorView dout,
                            TensorView expert_out, TensorView positions, TensorView topk_weight);
  // Grouped GEMM over G groups of rows: rows [offsets[g], offsets[g+1]) of
  // inp (N,C) times weight[g]^T, weight (G,OC,C) (each group an nn.Linear
  // without bias), into the same rows of out (N,OC); rows from offsets[G]
  // on are neither read nor written. Empty groups are fine. offsets (G+1)
  // int32, non-decreasing from 0, offsets[G] <= N. dtypes as matmul_forward's
  // (inp, weight, out all bf16 or all fp32; accumulation fp32).
  void grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                              TensorView offsets);
  // dinp (N,C) ASSIGNED on rows [0, offsets[G]) (skipped when empty()),
  // dweight (G,OC,C) fp32 ACCUMULATES.
  void grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                               TensorView inp, TensorView weight, TensorView offsets);
  // The load-balancing loss (transformers' load_balancing_loss_func) from
  // the pooled factors: counts (E) and prob_sums (E) summed over every layer
  // and every row of one micro-batch, `rows` = layers x rows pooled:
  //   aux (1) ASSIGNED = E * sum_e (counts_e / rows) (prob_sums_e / rows)
  //   dprob (E) ASSIGNED = grad_coef * E * counts_e / rows^2 (d(aux)/d(prob)
  //   of each row and expert, scaled by grad_coef: what moe_router_backward
  //   takes as dprob_shared).
  void moe_load_balance(TensorView aux, TensorView dprob, TensorView counts, TensorView prob_sums,
                        double rows, float grad_coef);

  // Sum of squares of all elements, accumulated in double (for the global norm).
  double sum_squares(TensorView t);
  // The same without a host round trip: out (fp32 {1}) = the sum over `runs`
  // of x[r.state + i]^2 (x fp32 1-D; r.param and r.decay are not used),
  // accumulated in double in a fixed order (deterministic) and rounded once;
  // 0 when there are no runs.
  void sum_squares_runs(TensorView out, TensorView x, const std::vector<AdamWRun>& runs);
  // torch.nn.utils.clip_grad_norm_'s factor, on the device. stats (fp32 {2}):
  // the global sum of squared gradients, and a value that is finite iff every
  // loss of the step is. scale (fp32 {1}) =
  //   min(1, max_norm / (sqrt(stats[0]) + 1e-6))   (1 when max_norm <= 0)
  // when both are finite, else NaN: the step is to be skipped, and
  // adamw_update_runs given that scale changes nothing.
  void clip_scale(TensorView scale, TensorView stats, float max_norm);

  // One torch.optim.AdamW step on a flat segment (all 1-D views of equal n):
  //   g = grad * grad_scale            (grad_scale folds clip_grad_norm_)
  //   m = beta1*m + (1-beta1)*g ;  v = beta2*v + (1-beta2)*g^2
  //   param -= lr * weight_decay * param          (decoupled decay, before the moment step)
  //   param -= lr * (m / (1-beta1^t)) / (sqrt(v / (1-beta2^t)) + eps)
  // t counts from 1.
  struct AdamWParams {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t t;
  };
  // A run of elements (kernels/core/adamw_runs.hpp): `param` and `state`
  // offsets differ when the parameters are whole and the optimizer state a
  // shard (ZeRO-1/2).
  using AdamWRun = gt::AdamWRun;
  // The step above over every run of the flat 1-D buffers param and
  // grad/m/v, as one launch on a device (torch's multi-tensor AdamW); what
  // no run covers is untouched and runs must not overlap. When param_bf16
  // (bf16, param's length) is not empty it receives every updated parameter
  // rounded to nearest even: the copy the bf16 GEMMs read, bit for bit what
  // cast() would give, without a pass of its own. When scale (fp32 {1}, this
  // backend's memory: clip_scale's output) is not empty the gradient is also
  // multiplied by scale[0], and a non-finite scale[0] leaves every buffer
  // untouched (the skipped step), decided on the device.
  void adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                         TensorView param_bf16, TensorView scale, const std::vector<AdamWRun>& runs,
                         const AdamWParams& p);
  // One segment, decayed: all of param/grad/m/v.
  void adamw_update(TensorView param, TensorView grad, TensorView m, TensorView v,
                    const AdamWParams& p) {
    adamw_update_runs(param, grad, m, v, TensorView{}, TensorView{}, {{0, 0, param.numel(), true}},
                      p);
  }

 protected:
  // ---- Around every op -------------------------------------------------------
  // Each entry point, once its checks passed and the observer was told, calls
  // begin_op(call), then the backend's do_<op> if it returned true, then
  // end_op(call) (also when do_<op> threw). A backend that stands in for
  // another one overrides these two instead of every op:
  //   * begin_op may rewrite the views `call` points at (they are the entry's
  //     own arguments): do_<op> receives them as rewritten. OffHostOps opens
  //     its memory and hands its CPU kernels host-labelled views so.
  //   * begin_op returning false skips do_<op>: the op computes nothing and
  //     writes no output, and a value-returning op (sum_squares) returns 0.
  //     That is a dry run (trainer/plan/dry_run_ops.hpp), whose values are
  //     zeros and mean nothing; a backend that computes always returns true.
  virtual bool begin_op(OpCall& call) {
    (void)call;
    return true;
  }
  virtual void end_op(const OpCall& call) noexcept { (void)call; }

  // ---- The backend's ops -------------------------------------------------------
  // Called by the entry point of the same name with arguments that meet its
  // shape contract; semantics as documented there. An op's implementation
  // never calls another op's public entry (the observer would see a nested
  // op): it calls the do_ method, or its own kernels.
  virtual void do_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                    TensorView wpe) = 0;
  virtual void do_embedding_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                                     TensorView tokens) = 0;
  virtual void do_token_embedding_forward(TensorView out, TensorView tokens, TensorView wte,
                                          int64_t vocab_start) = 0;
  virtual void do_token_embedding_backward(TensorView dwte, TensorView dout, TensorView tokens,
                                           int64_t vocab_start) = 0;
  virtual void do_position_embedding_forward(TensorView out, TensorView wpe, int64_t first_row,
                                             int T) = 0;
  virtual void do_position_embedding_backward(TensorView dwpe, TensorView dout, int64_t first_row,
                                              int T) = 0;
  virtual void do_layernorm_forward(TensorView out, TensorView mean, TensorView rstd,
                                    TensorView inp, TensorView weight, TensorView bias,
                                    TensorView row_amax) = 0;
  virtual void do_add_layernorm_forward(TensorView res, TensorView out, TensorView mean,
                                        TensorView rstd, TensorView a, TensorView b,
                                        TensorView weight, TensorView bias,
                                        TensorView row_amax) = 0;
  virtual void do_layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                     TensorView dout, TensorView inp, TensorView weight,
                                     TensorView mean, TensorView rstd, TensorView dinp_bf16,
                                     TensorView row_amax) = 0;
  virtual void do_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                 TensorView bias) = 0;
  virtual void do_matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias,
                                  TensorView dout, TensorView inp, TensorView weight) = 0;
  virtual void do_matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp,
                                      TensorView weight, TensorView bias) = 0;
  virtual void do_matmul_backward_dgelu(TensorView dinp, TensorView dweight, TensorView dbias,
                                        TensorView dout, TensorView inp, TensorView weight,
                                        TensorView pre) = 0;
  virtual void do_add_bias(TensorView out, TensorView bias) = 0;
  // bias_backward and the fp8 ops: a backend without them says so (these
  // defaults throw naming the backend and the op).
  virtual void do_bias_backward(TensorView dbias, TensorView dout);
  virtual void do_fp8_amax(TensorView amax, TensorView x, Fp8Reduce over);
  virtual void do_fp8_scale_from_amax(TensorView scale, TensorView amax, Fp8Format format,
                                      bool pow2);
  virtual void do_fp8_matmul(TensorView out, TensorView a, TensorView a_scale, TensorView b,
                             TensorView b_scale, TensorView bias, const Fp8MatmulSpec& spec);
  virtual void do_fp8_quantize(TensorView q, TensorView x, TensorView scale, Fp8Format format);
  // n_kv_head is resolved (never 0) and divides n_head.
  virtual void do_attention_forward(TensorView out, TensorView saved, TensorView qkv, int n_head,
                                    int n_kv_head) = 0;
  virtual void do_attention_backward(TensorView dqkv, TensorView scratch, TensorView dout,
                                     TensorView qkv, TensorView out, TensorView saved, int n_head,
                                     int n_kv_head) = 0;
  virtual void do_attention_block_forward(TensorView out, TensorView lse, TensorView scratch,
                                          TensorView q, TensorView k, TensorView v, int64_t q_pos,
                                          int64_t k_pos, int n_head, int n_kv_head,
                                          bool accumulate) = 0;
  virtual void do_attention_block_backward(TensorView dq, TensorView dk, TensorView dv,
                                           TensorView scratch, TensorView dout, TensorView q,
                                           TensorView k, TensorView v, TensorView lse,
                                           TensorView delta, int64_t q_pos, int64_t k_pos,
                                           int n_head, int n_kv_head) = 0;
  virtual void do_attention_row_dot(TensorView delta, TensorView dout, TensorView out,
                                    int n_head) = 0;
  virtual void do_gelu_forward(TensorView out, TensorView inp, TensorView row_amax) = 0;
  virtual void do_gelu_backward(TensorView dinp, TensorView inp, TensorView dout,
                                TensorView row_amax) = 0;
  virtual void do_add(TensorView out, TensorView a, TensorView b) = 0;
  virtual void do_accumulate(TensorView acc, TensorView x) = 0;
  virtual void do_zero(TensorView t) = 0;
  virtual void do_copy(TensorView dst, TensorView src) = 0;
  virtual void do_cast(TensorView dst, TensorView src) = 0;
  virtual void do_cast_rows(TensorView dst, TensorView src) = 0;
  virtual void do_softmax_cross_entropy(TensorView losses, TensorView dlogits, TensorView logits,
                                        TensorView targets, int64_t vocab_size,
                                        float grad_scale) = 0;
  virtual void do_cross_entropy_shard_max(TensorView row_max, TensorView logits,
                                          int64_t vocab_start, int64_t vocab_size) = 0;
  virtual void do_cross_entropy_shard_sums(TensorView sumexp, TensorView target_logit,
                                           TensorView logits, TensorView targets,
                                           TensorView row_max, int64_t vocab_start,
                                           int64_t vocab_size) = 0;
  virtual void do_cross_entropy_shard_finish(TensorView losses, TensorView dlogits,
                                             TensorView logits, TensorView targets,
                                             TensorView row_max, TensorView sumexp,
                                             TensorView target_logit, int64_t vocab_start,
                                             int64_t vocab_size, float grad_scale) = 0;
  virtual void do_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp,
                                  TensorView weight, float eps, TensorView row_amax) = 0;
  virtual void do_add_rmsnorm_forward(TensorView res, TensorView out, TensorView rstd,
                                     TensorView a, TensorView b, TensorView weight, float eps,
                                     TensorView row_amax) = 0;
  virtual void do_rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                   TensorView inp, TensorView weight, TensorView rstd,
                                   TensorView dinp_bf16, TensorView row_amax) = 0;
  virtual void do_rope_forward(TensorView qk, TensorView cos_sin, int rot_heads, int64_t first_row,
                               int T) = 0;
  virtual void do_rope_backward(TensorView dqk, TensorView cos_sin, int rot_heads,
                                int64_t first_row, int T) = 0;
  virtual void do_swiglu_forward(TensorView out, TensorView gu, TensorView row_amax) = 0;
  virtual void do_swiglu_backward(TensorView dgu, TensorView dout, TensorView gu,
                                  TensorView row_amax) = 0;
  virtual void do_moe_router_forward(TensorView probs, TensorView lse, TensorView topk_expert,
                                     TensorView topk_weight, TensorView logits,
                                     TensorView bias) = 0;
  virtual void do_moe_router_backward(TensorView dlogits, TensorView dtopk_weight,
                                      TensorView probs, TensorView lse, TensorView topk_expert,
                                      TensorView topk_weight, TensorView dprob_shared,
                                      float z_grad) = 0;
  virtual void do_moe_router_stats(TensorView counts, TensorView prob_sums, TensorView probs,
                                   TensorView topk_expert) = 0;
  virtual void do_moe_dispatch_plan(TensorView positions, TensorView offsets,
                                    TensorView topk_expert, TensorView topk_weight,
                                    int64_t capacity) = 0;
  virtual void do_moe_permute(TensorView out, TensorView inp, TensorView positions) = 0;
  virtual void do_moe_permute_backward(TensorView dinp, TensorView dout, TensorView positions) = 0;
  virtual void do_moe_combine_forward(TensorView out, TensorView expert_out, TensorView positions,
                                      TensorView topk_weight) = 0;
  virtual void do_moe_combine_backward(TensorView dexpert_out, TensorView dtopk_weight,
                                       TensorView dout, TensorView expert_out,
                                       TensorView positions, TensorView topk_weight) = 0;
  virtual void do_grouped_matmul_forward(TensorView out, TensorView inp, TensorView weight,
                                         TensorView offsets) = 0;
  virtual void do_grouped_matmul_backward(TensorView dinp, TensorView dweight, TensorView dout,
                                          TensorView inp, TensorView weight,
                                          TensorView offsets) = 0;
  virtual void do_moe_load_balance(TensorView aux, TensorView dprob, TensorView counts,
                                   TensorView prob_sums, double rows, float grad_coef) = 0;
  virtual double do_sum_squares(TensorView t) = 0;
  virtual void do_sum_squares_runs(TensorView out, TensorView x,
                                   const std::vector<AdamWRun>& runs) = 0;
  virtual void do_clip_scale(TensorView scale, TensorView stats, float max_norm) = 0;
  virtual void do_adamw_update_runs(TensorView param, TensorView grad, TensorView m, TensorView v,
                                    TensorView param_bf16, TensorView scale,
                                    const std::vector<AdamWRun>& runs, const AdamWParams& p) = 0;

 private:
  class Scope;  // ops_entry.hpp: the observer and begin_op/end_op around one op
  OpObserver* observer_ = nullptr;
};

// n fp32 elements of `ops`' memory, zero-filled as Ops::allocate gives them
// (padding that no op writes stays zero); n <= 0 gives an empty buffer.
inline Buffer allocate_floats(Ops& ops, int64_t n) {
  return ops.allocate(static_cast<size_t>(n > 0 ? n : 0) * sizeof(float));
}

}  // namespace gt
