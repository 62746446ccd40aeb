#include "trainer/parallelize/context_parallel.hpp"

#include <algorithm>

#include "kernels/core/error.hpp"

namespace gt {

// ---- SequenceChunks ---------------------------------------------------------

SequenceChunks::SequenceChunks(int seq_len, int cp, bool load_balance)
    : seq_len_(seq_len), cp_(cp), chunk_len_(0), load_balance_(load_balance) {
  GT_CHECK(cp >= 1 && seq_len >= 1, "context parallelism: seq_len ", seq_len, ", cp ", cp);
  const int n = load_balance ? 2 * cp : cp;
  GT_CHECK(cp == 1 || seq_len % n == 0, "context parallelism cuts each sequence of ", seq_len,
           " tokens into ", n, load_balance ? " chunks (2 x parallel.cp, load balanced)" : " chunks",
           ": the length must be a multiple of ", n);
  chunk_len_ = cp == 1 ? seq_len : seq_len / n;
}

std::vector<int> SequenceChunks::chunks(int rank) const {
  GT_CHECK(rank >= 0 && rank < cp_, "cp rank ", rank, " of ", cp_);
  if (cp_ == 1) return {0};
  if (load_balance_) return {rank, 2 * cp_ - 1 - rank};
  return {rank};
}

int SequenceChunks::position(int rank, int i) const {
  GT_CHECK(i >= 0 && i < local_len(), "local index ", i, " of ", local_len());
  return chunks(rank)[static_cast<size_t>(i / chunk_len_)] * chunk_len_ + i % chunk_len_;
}

std::vector<int32_t> SequenceChunks::positions(int rank) const {
  std::vector<int32_t> out(static_cast<size_t>(local_len()));
  for (int i = 0; i < local_len(); ++i) out[static_cast<size_t>(i)] = position(rank, i);
  return out;
}

// ---- Views ------------------------------------------------------------------

namespace {

// A (B, n, w) view at element offset `at` of `base`, batch and row strides
// (sb, st), innermost contiguous.
TensorView strided(void* base, DType dt, Device dev, int64_t at, int64_t B, int64_t n, int64_t w,
                   int64_t sb, int64_t st) {
  TensorView v = make_view(static_cast<char*>(base) + at * int64_t(dtype_size(dt)), dt, dev,
                           {B, n, w});
  v.strides = {sb, st, 1, 0};
  return v;
}

// A (rows, cols) view with row stride ld at element offset `at`.
TensorView strided_rows(void* base, DType dt, Device dev, int64_t at, int64_t rows, int64_t cols,
                        int64_t ld) {
  TensorView v =
      make_view(static_cast<char*>(base) + at * int64_t(dtype_size(dt)), dt, dev, {rows, cols});
  v.strides = {ld, 1, 0, 0};
  return v;
}

}  // namespace

// One call's extents: B sequences of Tl local rows in chunks of Tc, NH query
// and KV key/value heads of hs, a qkv row of W = C + 2 Ckv.
struct ContextParallelAttention::Shape {
  int64_t B, Tl, Tc;
  int NH, KV;
  int64_t C, Ckv, W;
  int64_t kv_elems() const { return B * Tl * 2 * Ckv; }  // one rank's packed K|V
  TensorView qkv, lse;                                   // lse: (B, NH, Tl) fp32
  TensorView dout;                                       // backward only
};

// ---- Sizes ------------------------------------------------------------------

int64_t ContextParallelAttention::Scratch::bytes() const {
  return kv * int64_t(dtype_size(act)) + (out + dkv + delta + block) * 4;
}

ContextParallelAttention::Scratch ContextParallelAttention::scratch(
    const SequenceChunks& chunks, CpComm mode, ComputeDType dtype, int max_rows, int n_head,
    int n_kv_head, int head_size, int64_t block_scratch) {
  Scratch s;
  s.act = dtype == ComputeDType::bf16 ? DType::bf16 : DType::f32;
  const int cp = chunks.cp();
  if (cp == 1) return s;
  const int64_t B = max_rows, Tl = chunks.local_len();
  const int64_t kv = B * Tl * 2 * int64_t(n_kv_head) * head_size;
  const bool ring = mode == CpComm::ring;
  s.kv = (ring ? 2 : cp) * kv;
  s.out = B * Tl * int64_t(n_head) * head_size;
  s.dkv = (ring ? 3 : cp + 1) * kv;
  s.delta = B * n_head * Tl;
  s.block = block_scratch;
  return s;
}

int64_t ContextParallelAttention::saved_elems(const Ops& ops, int cp, int max_rows, int n_head,
                                              int local_len) {
  return cp == 1 ? ops.attention_saved_elems(max_rows, n_head, local_len)
                 : int64_t(max_rows) * n_head * local_len;
}

int64_t ContextParallelAttention::scratch_elems(const Ops& ops, int cp, int max_rows, int n_head,
                                                int local_len) {
  return cp == 1 ? ops.attention_scratch_elems(max_rows, n_head, local_len) : 0;
}

ContextParallelAttention::ContextParallelAttention(Ops& ops, ContextParallelGroup group,
                                                   const SequenceChunks& chunks,
                                                   ComputeDType dtype, int max_rows, int n_head,
                                                   int n_kv_head, int head_size)
    : ops_(ops),
      group_(group),
      chunks_(chunks),
      act_(dtype == ComputeDType::bf16 ? DType::bf16 : DType::f32) {
  GT_CHECK(chunks.cp() == group.size(), "the sequence is cut for ", chunks.cp(),
           " context-parallel ranks, the group has ", group.size());
  const Scratch s =
      scratch(chunks, group.mode, dtype, max_rows, n_head, n_kv_head, head_size,
              group.size() > 1 ? ops.attention_block_scratch_elems(
                                     max_rows, n_head, chunks.chunk_len(), chunks.chunk_len())
                               : 0);
  kv_ = ops.allocate(static_cast<size_t>(s.kv) * dtype_size(act_));
  out_ = allocate_floats(ops, s.out);
  dkv_ = allocate_floats(ops, s.dkv);
  delta_ = allocate_floats(ops, s.delta);
  block_ = allocate_floats(ops, s.block);
}

int64_t ContextParallelAttention::bytes() const {
  return static_cast<int64_t>(kv_.bytes() + out_.bytes() + dkv_.bytes() + delta_.bytes() +
                              block_.bytes());
}

int64_t ContextParallelAttention::words(int64_t n) const {
  const int64_t bytes = n * int64_t(dtype_size(act_));
  GT_CHECK(bytes % 4 == 0, "context parallelism moves ", n, " ", dtype_name(act_),
           " elements as 4-byte words: their count must be even");
  return bytes / 4;
}

// ---- The blocks of one K|V owner --------------------------------------------

void ContextParallelAttention::attend(const Shape& s, TensorView kv, int owner,
                                      std::vector<bool>& started) {
  const Device dev = ops_.device();
  const std::vector<int> mine = chunks_.chunks(group_.rank()), theirs = chunks_.chunks(owner);
  TensorView block = make_view(block_.data(), DType::f32, dev, {int64_t(block_.bytes() / 4)});
  for (size_t j = 0; j < mine.size(); ++j)
    for (size_t i = 0; i < theirs.size(); ++i) {
      if (theirs[i] > mine[j]) continue;  // entirely after every query: nothing to see
      const int64_t qr = int64_t(j) * s.Tc, kr = int64_t(i) * s.Tc;
      ops_.attention_block_forward(
          strided(out_.data(), DType::f32, dev, qr * s.C, s.B, s.Tc, s.C, s.Tl * s.C, s.C),
          strided(s.lse.data, DType::f32, dev, qr, s.B, s.NH, s.Tc, s.NH * s.Tl, s.Tl), block,
          strided(s.qkv.data, act_, dev, qr * s.W, s.B, s.Tc, s.C, s.Tl * s.W, s.W),
          strided(kv.data, act_, dev, kr * 2 * s.Ckv, s.B, s.Tc, s.Ckv, s.Tl * 2 * s.Ckv,
                  2 * s.Ckv),
          strided(kv.data, act_, dev, kr * 2 * s.Ckv + s.Ckv, s.B, s.Tc, s.Ckv, s.Tl * 2 * s.Ckv,
                  2 * s.Ckv),
          int64_t(mine[j]) * s.Tc, int64_t(theirs[i]) * s.Tc, s.NH, s.KV, started[j]);
      started[j] = true;
    }
}

void ContextParallelAttention::attend_backward(const Shape& s, TensorView kv, TensorView dkv,
                                               int owner) {
  const Device dev = ops_.device();
  const std::vector<int> mine = chunks_.chunks(group_.rank()), theirs = chunks_.chunks(owner);
  TensorView block = make_view(block_.data(), DType::f32, dev, {int64_t(block_.bytes() / 4)});
  const int64_t kvw = 2 * s.Ckv;
  for (size_t j = 0; j < mine.size(); ++j)
    for (size_t i = 0; i < theirs.size(); ++i) {
      if (theirs[i] > mine[j]) continue;
      const int64_t qr = int64_t(j) * s.Tc, kr = int64_t(i) * s.Tc;
      ops_.attention_block_backward(
          strided(out_.data(), DType::f32, dev, qr * s.C, s.B, s.Tc, s.C, s.Tl * s.C, s.C),
          strided(dkv.data, DType::f32, dev, kr * kvw, s.B, s.Tc, s.Ckv, s.Tl * kvw, kvw),
          strided(dkv.data, DType::f32, dev, kr * kvw + s.Ckv, s.B, s.Tc, s.Ckv, s.Tl * kvw, kvw),
          block, strided(s.dout.data, act_, dev, qr * s.C, s.B, s.Tc, s.C, s.Tl * s.C, s.C),
          strided(s.qkv.data, act_, dev, qr * s.W, s.B, s.Tc, s.C, s.Tl * s.W, s.W),
          strided(kv.data, act_, dev, kr * kvw, s.B, s.Tc, s.Ckv, s.Tl * kvw, kvw),
          strided(kv.data, act_, dev, kr * kvw + s.Ckv, s.B, s.Tc, s.Ckv, s.Tl * kvw, kvw),
          strided(s.lse.data, DType::f32, dev, qr, s.B, s.NH, s.Tc, s.NH * s.Tl, s.Tl),
          strided(delta_.data(), DType::f32, dev, qr, s.B, s.NH, s.Tc, s.NH * s.Tl, s.Tl),
          int64_t(mine[j]) * s.Tc, int64_t(theirs[i]) * s.Tc, s.NH, s.KV);
    }
}

void ContextParallelAttention::pack_kv(const Shape& s, TensorView dst) {
  const Device dev = ops_.device();
  ops_.cast_rows(strided_rows(dst.data, act_, dev, 0, s.B * s.Tl, 2 * s.Ckv, 2 * s.Ckv),
                 strided_rows(s.qkv.data, act_, dev, s.C, s.B * s.Tl, 2 * s.Ckv, s.W));
}

// The K|V block of `rank` in the gathered buffer.
namespace {
TensorView block_of(const Buffer& buf, DType dt, Device dev, int64_t n, int rank) {
  return make_view(static_cast<char*>(const_cast<void*>(buf.data())) +
                       rank * n * int64_t(dtype_size(dt)),
                   dt, dev, {n});
}
}  // namespace

// ---- Forward ----------------------------------------------------------------

namespace {
const AxisPlacement kHeads = AxisPlacement::shard(ActDim::heads);
const AxisPlacement kSequence = AxisPlacement::shard(ActDim::sequence);
}  // namespace

ContextParallelAttention::Shape ContextParallelAttention::shape_of(const TensorView& qkv,
                                                                   const TensorView& saved,
                                                                   int n_head,
                                                                   int n_kv_head) const {
  Shape s;
  s.B = qkv.shape[0];
  s.Tl = qkv.shape[1];
  s.Tc = chunks_.chunk_len();
  s.NH = n_head;
  s.KV = n_kv_head;
  s.W = qkv.shape[2];
  const int64_t hs = s.W / (n_head + 2 * n_kv_head);
  s.C = n_head * hs;
  s.Ckv = n_kv_head * hs;
  GT_CHECK(s.Tl == chunks_.local_len(), "context-parallel attention over ", s.Tl,
           " rows per sequence; the sequence is cut into ", chunks_.local_len(), " per rank");
  s.qkv = qkv;
  s.lse = make_view(saved.data, DType::f32, saved.device, {s.B, int64_t(n_head), s.Tl});
  return s;
}

Activation ContextParallelAttention::gather_kv(const Activation& qkv, int n_head, int n_kv_head) {
  expect_placement(qkv, {kHeads, kSequence}, "cp gather_kv", "input", log_);
  const Shape s = shape_of(qkv.view, make_view(nullptr, DType::f32, qkv.view.device, {0}), n_head,
                           n_kv_head);
  const int64_t n = s.kv_elems();
  auto* all = static_cast<char*>(kv_.data());
  char* mine = all + group_.rank() * n * int64_t(dtype_size(act_));
  pack_kv(s, make_view(mine, act_, ops_.device(), {n}));
  // In place: this rank's block is already at its slot.
  group_.comm
      ->all_gather(reinterpret_cast<const float*>(mine), reinterpret_cast<float*>(all), words(n))
      .wait();
  return given({make_view(all, act_, ops_.device(), {group_.size(), s.B, s.Tl, 2 * s.Ckv}),
                {kHeads, AxisPlacement::replicated()}, qkv.name + " keys, values"},
               "cp gather_kv", "output", log_);
}

void ContextParallelAttention::attend(TensorView saved, const Activation& qkv, const Activation& kv,
                                      int n_head, int n_kv_head) {
  expect_placement(qkv, {kHeads, kSequence}, "cp attend", "queries", log_);
  expect_placement(kv, {kHeads, AxisPlacement::replicated()}, "cp attend", "keys and values",
                   log_);
  const Shape s = shape_of(qkv.view, saved, n_head, n_kv_head);
  GT_CHECK(kv.view.numel() == group_.size() * s.kv_elems(), "cp attend: keys and values '",
           kv.name, "' hold ", kv.view.numel(), " elements, not every rank's ",
           group_.size() * s.kv_elems());
  std::vector<bool> started(static_cast<size_t>(chunks_.chunks_per_rank()), false);
  for (int owner = 0; owner < group_.size(); ++owner)
    attend(s, block_of(kv_, act_, ops_.device(), s.kv_elems(), owner), owner, started);
}

void ContextParallelAttention::forward_ring(const Shape& s) {
  const int cp = group_.size(), r = group_.rank();
  const int next = (r + 1) % cp, prev = (r + cp - 1) % cp;
  const int64_t n = s.kv_elems();
  const Device dev = ops_.device();
  pack_kv(s, block_of(kv_, act_, dev, n, 0));
  std::vector<bool> started(static_cast<size_t>(chunks_.chunks_per_rank()), false);
  for (int step = 0; step < cp; ++step) {
    const TensorView cur = block_of(kv_, act_, dev, n, step % 2);
    const TensorView nxt = block_of(kv_, act_, dev, n, (step + 1) % 2);
    CommHandle sent, received;
    if (step + 1 < cp) {
      // The next hop travels while this block is attended to.
      sent = group_.comm->send(static_cast<const float*>(cur.data), words(n), next, 0);
      received = group_.comm->recv(static_cast<float*>(nxt.data), words(n), prev, 0);
      received.test();  // starts queued point-to-point work (NCCL groups it)
    }
    attend(s, cur, (r - step + cp) % cp, started);
    sent.wait();
    received.wait();
  }
}

Activation ContextParallelAttention::forward(const Target& target, TensorView saved,
                                             const Activation& qkv, int n_head, int n_kv_head) {
  const TensorView out = target.view;
  gathered_for_ = nullptr;  // a forward always gathers: the same qkv buffer may hold new rows
  const char* layer = "attention forward";
  expect_placement(qkv, {kHeads, kSequence}, layer, "input", log_);
  const Activation result{out, qkv.placement, target.name};
  if (group_.size() == 1) {
    ops_.attention_forward(out, saved, qkv.view, n_head, n_kv_head);
    return given(result, layer, "output", log_);
  }
  const Shape s = shape_of(qkv.view, saved, n_head, n_kv_head);
  if (group_.mode == CpComm::ring) {
    forward_ring(s);
  } else {
    attend(saved, qkv, gather_kv(qkv, n_head, n_kv_head), n_head, n_kv_head);
    gathered_for_ = qkv.view.data;
  }
  // The merged fp32 output, rounded once into the activations' dtype.
  ops_.cast(out, make_view(out_.data(), DType::f32, ops_.device(), {s.B, s.Tl, s.C}));
  return given(result, layer, "output", log_);
}

// ---- Backward ---------------------------------------------------------------

Activation ContextParallelAttention::backward_allgather(const Shape& s, const std::string& name) {
  const int cp = group_.size();
  const int64_t n = s.kv_elems();
  const Device dev = ops_.device();
  ops_.zero(make_view(dkv_.data(), DType::f32, dev, {cp * n}));
  for (int owner = 0; owner < cp; ++owner)
    attend_backward(s, block_of(kv_, act_, dev, n, owner),
                    block_of(dkv_, DType::f32, dev, n, owner), owner);
  // Every rank's dK|dV from this rank's queries: partial sums over cp.
  const Activation partial{make_view(dkv_.data(), DType::f32, dev, {cp, s.B, s.Tl, 2 * s.Ckv}),
                           {kHeads, AxisPlacement::partial()}, name};
  given(partial, "cp reduce_scatter dK, dV", "input", log_);
  // Each rank's dK|dV summed over the ranks whose queries saw them.
  float* all = dkv_.f32();
  group_.comm->reduce_scatter_sum(all, all + cp * n, n).wait();
  return given({block_of(dkv_, DType::f32, dev, n, cp), {kHeads, kSequence}, name},
               "cp reduce_scatter dK, dV", "output", log_);
}

Activation ContextParallelAttention::backward_ring(const Shape& s, const std::string& name) {
  const int cp = group_.size(), r = group_.rank();
  const int next = (r + 1) % cp, prev = (r + cp - 1) % cp;
  const int64_t n = s.kv_elems();
  const Device dev = ops_.device();
  pack_kv(s, block_of(kv_, act_, dev, n, 0));
  // dK|dV: two accumulators (one computing while the other is on the wire)
  // and the partial sum arriving from the previous rank.
  const TensorView incoming = block_of(dkv_, DType::f32, dev, n, 2);
  CommHandle partial_sent, partial_received;
  for (int step = 0; step < cp; ++step) {
    const int owner = (r - step + cp) % cp;
    const TensorView cur = block_of(kv_, act_, dev, n, step % 2);
    const TensorView nxt = block_of(kv_, act_, dev, n, (step + 1) % 2);
    const TensorView acc = block_of(dkv_, DType::f32, dev, n, step % 2);
    CommHandle kv_sent, kv_received;
    if (step + 1 < cp) {
      kv_sent = group_.comm->send(static_cast<const float*>(cur.data), words(n), next, 0);
      kv_received = group_.comm->recv(static_cast<float*>(nxt.data), words(n), prev, 0);
      kv_received.test();
    }
    // The previous accumulator of this slot left two hops ago and was waited.
    ops_.zero(acc);
    attend_backward(s, cur, acc, owner);
    if (step > 0) {
      // The ranks before have added their queries' share of `owner`'s dK|dV.
      partial_received.wait();
      ops_.accumulate(acc, incoming);
    }
    partial_sent.wait();
    partial_sent = group_.comm->send(acc.f32(), n, next, 1);
    partial_received = group_.comm->recv(incoming.f32(), n, prev, 1);
    partial_received.test();
    kv_sent.wait();
    kv_received.wait();
  }
  // The last hop brought this rank's own dK|dV, every rank's share summed.
  partial_received.wait();
  partial_sent.wait();
  return given({incoming, {kHeads, kSequence}, name}, "cp ring dK, dV", "output", log_);
}

Activation ContextParallelAttention::backward(const Target& target, TensorView scratch,
                                              const Activation& dout, const Activation& qkv,
                                              const Activation& out, TensorView saved, int n_head,
                                              int n_kv_head) {
  const void* held = gathered_for_;
  gathered_for_ = nullptr;
  const TensorView dqkv = target.view;
  const char* layer = "attention backward";
  expect_placement(dout, {kHeads, kSequence}, layer, "output gradient", log_);
  expect_placement(qkv, {kHeads, kSequence}, layer, "input", log_);
  expect_placement(out, {kHeads, kSequence}, layer, "output", log_);
  const Activation result{dqkv, qkv.placement, target.name};
  if (group_.size() == 1) {
    ops_.attention_backward(dqkv, scratch, dout.view, qkv.view, out.view, saved, n_head,
                            n_kv_head);
    return given(result, layer, "input gradient", log_);
  }
  Shape s = shape_of(qkv.view, saved, n_head, n_kv_head);
  s.dout = dout.view;
  const Device dev = ops_.device();
  // delta = rowsum(dout o out) of the global output; dq accumulates in out_.
  ops_.attention_row_dot(make_view(delta_.data(), DType::f32, dev, {s.B, int64_t(n_head), s.Tl}),
                         dout.view, out.view, n_head);
  ops_.zero(make_view(out_.data(), DType::f32, dev, {s.B * s.Tl * s.C}));
  const std::string name = "d(" + qkv.name + " keys, values)";
  Activation dkv;
  if (group_.mode == CpComm::ring) {
    dkv = backward_ring(s, name);
  } else {
    if (held != qkv.view.data) gather_kv(qkv, n_head, n_kv_head);  // else still held
    dkv = backward_allgather(s, name);
  }
  // dq and this rank's rows' dK|dV into the packed gradient, each rounded once.
  expect_placement(dkv, {kHeads, kSequence}, layer, "key/value gradient", log_);
  ops_.cast_rows(strided_rows(dqkv.data, act_, dev, 0, s.B * s.Tl, s.C, s.W),
                 strided_rows(out_.data(), DType::f32, dev, 0, s.B * s.Tl, s.C, s.C));
  ops_.cast_rows(strided_rows(dqkv.data, act_, dev, s.C, s.B * s.Tl, 2 * s.Ckv, s.W),
                 strided_rows(dkv.view.data, DType::f32, dev, 0, s.B * s.Tl, 2 * s.Ckv, 2 * s.Ckv));
  return given(result, layer, "input gradient", log_);
}

}  // namespace gt
