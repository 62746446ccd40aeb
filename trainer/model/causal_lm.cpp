#include "trainer/model/causal_lm.hpp"

#include <algorithm>
#include <limits>

#include "kernels/core/bf16.hpp"
#include "kernels/core/error.hpp"

namespace gt {

namespace {
// A view of one parameter's storage (its shape as the layout cut it).
TensorView shaped(float* data, Device device, const ParamSpec& s) {
  TensorView t = make_view(data, DType::f32, device, {s.numel});
  t.ndim = static_cast<int>(s.shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = s.shape[static_cast<size_t>(i)];
    t.strides[i] = stride;
    stride *= t.shape[i];
  }
  return t;
}
}  // namespace

CausalLM::CausalLM(const char* family, const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                   Recompute recompute, ComputeDType dtype)
    : family_(family),
      cfg_(cfg),
      ops_(ops),
      layout_(cfg),
      recompute_(recompute),
      max_rows_(max_rows),
      max_seq_(max_seq),
      dtype_(dtype),
      seq_(max_seq, 1, false),
      end_layer_(cfg.n_layer) {
  owned_ = std::make_unique<LocalParameters>(layout_, ops_);
  store_ = owned_.get();
}

CausalLM::CausalLM(const char* family, const ModelConfig& cfg, Ops& ops, int max_rows, int max_seq,
                   const ParameterLayout& layout, ParameterStore& store,
                   const TensorParallelGroup& group, Recompute recompute, ComputeDType dtype,
                   std::optional<StageSpan> chunk, const ContextParallelGroup& cp)
    : family_(family),
      cfg_(cfg),
      ops_(ops),
      layout_(layout),
      store_(&store),
      recompute_(recompute),
      max_rows_(max_rows),
      max_seq_(max_seq),
      dtype_(dtype),
      cp_(cp),
      seq_(max_seq * cp.size(), cp.size(), cp.load_balance),
      first_layer_(-1),
      end_layer_(-1) {
  layout.check_built_for(group.size(), group.rank());
  // A layout of one chunk (the whole model or one stage) is the model's
  // stage until told otherwise; one of several chunks waits for
  // set_pipeline_stage (stage_set() is false until then).
  if (layout.chunks().size() == 1) {
    first_layer_ = layout.chunks().front().first_layer;
    end_layer_ = layout.chunks().front().end_layer;
  }
  if (chunk) set_pipeline_stage({chunk->first_layer, chunk->end_layer});
  // The activations' size: this instance's chunk when it has one, else the
  // longest of the layout's chunks and the head if the layout holds it.
  if (stage_set()) {
    sized_blocks_ = end_layer_ - first_layer_;
    sized_head_ = end_layer_ == cfg_.n_layer;
  } else {
    sized_blocks_ = 0;
    for (const StageSpan& c : layout.chunks())
      sized_blocks_ = std::max(sized_blocks_, c.end_layer - c.first_layer);
    sized_head_ = layout.head_unit() >= 0;
  }
}

CausalLM::~CausalLM() = default;

ActivationShape CausalLM::activation_shape(const TensorParallelGroup& group) const {
  GT_CHECK(seq_.seq_len() <= cfg_.block_size, "seq ", seq_.seq_len(), " > block_size ",
           cfg_.block_size);
  ActivationShape shape;
  shape.max_rows = max_rows_;
  shape.max_seq = max_seq_;
  shape.tp = group.size();
  shape.overlap = group.overlap;
  shape.recompute = recompute_;
  shape.dtype = dtype_;
  const int NHl = cfg_.n_head / group.size();
  shape.cp = cp_.size();
  shape.cp_mode = cp_.mode;
  shape.cp_load_balance = cp_.load_balance;
  if (cp_.size() > 1)
    shape.cp_block_scratch =
        ops_.attention_block_scratch_elems(max_rows_, NHl, seq_.chunk_len(), seq_.chunk_len());
  shape.attention_saved =
      ContextParallelAttention::saved_elems(ops_, cp_.size(), max_rows_, NHl, max_seq_);
  shape.attention_scratch =
      ContextParallelAttention::scratch_elems(ops_, cp_.size(), max_rows_, NHl, max_seq_);
  shape.store_keeps_bf16_params = store_->keeps_bf16_params();
  // A stage's instance holds its chunk's blocks (layer_act counts from the
  // chunk's first block) and the head's buffers only where it runs them.
  shape.blocks = sized_blocks_;
  shape.head = sized_head_;
  return shape;
}

void CausalLM::make_attention(int n_head, int n_kv_head) {
  attention_ = std::make_unique<ContextParallelAttention>(ops_, cp_, seq_, dtype_, max_rows_,
                                                          n_head, n_kv_head, cfg_.head_size());
  attention_->set_placement_log(placement_log_);
}

void CausalLM::set_fp8(const Fp8Settings& settings) {
  GT_CHECK(!settings.on() || dtype_ == ComputeDType::bf16,
           "runtime.fp8 needs runtime.dtype=bf16 (the model stores its activations in ",
           to_string(dtype_), ")");
  // The store may hold weights gathered as fp8 codes (parallel.fp8_allgather).
  parallel_->enable_fp8(settings, cp_, store_);
}

void CausalLM::set_placement_log(PlacementLog* log) {
  placement_log_ = log;
  parallel_->set_placement_log(log);
  if (attention_) attention_->set_placement_log(log);
}

Buffer CausalLM::allocate(const BufferSize& b) {
  return ops_.allocate(static_cast<size_t>(std::max<int64_t>(b.bytes(), 0)));
}

CausalLM::LayerBuffer CausalLM::allocate_layer(const BufferSize& b) {
  return LayerBuffer{allocate(b), b.slots, b.dtype};
}

void CausalLM::allocate_ends(const EndSizes& ends, const TpLayerContext::Scratch& scratch,
                             const LinearPrecision::Sizes& precision,
                             const TensorParallelGroup& group) {
  shards_ = group.size();
  act_dtype_ = dtype_ == ComputeDType::bf16 ? DType::bf16 : DType::f32;
  host_losses_.assign(static_cast<size_t>(ends.losses.elems), 0.f);
  ends_.tokens = allocate(ends.tokens);
  ends_.targets = allocate(ends.targets);
  ends_.logits = allocate(ends.logits);
  ends_.losses = allocate(ends.losses);
  ends_.loss_sum = allocate(ends.loss_sum);
  parallel_ = std::make_unique<TpLayerContext>(ops_, group, dtype_, scratch, precision);
}

int64_t CausalLM::shared_bytes() const {
  size_t n = 0;
  for (const Buffer* b :
       {&ends_.tokens, &ends_.targets, &ends_.logits, &ends_.losses, &ends_.loss_sum})
    n += b->bytes();
  // The tensor-parallel layers' scratch, precision copies and statistics.
  return static_cast<int64_t>(n) + parallel_->bytes();
}

// ---- Parameters -------------------------------------------------------------

float* CausalLM::params() {
  GT_CHECK(owned_, family_, "::params(): the parameters live in an external ParameterStore");
  GT_CHECK(ops_.device() == Device::cpu, family_, "::params(): host pointer asked of a ",
           device_name(ops_.device()), " model; use flat_params() and Ops::download");
  return owned_->params();
}
float* CausalLM::grads() {
  GT_CHECK(owned_, family_, "::grads(): the gradients live in an external ParameterStore");
  GT_CHECK(ops_.device() == Device::cpu, family_, "::grads(): host pointer asked of a ",
           device_name(ops_.device()), " model; use flat_grads() and Ops::download");
  return owned_->grads();
}
TensorView CausalLM::flat_params() {
  GT_CHECK(owned_, family_, "::flat_params(): the parameters live in an external ParameterStore");
  return view(owned_->params(), {layout_.total()});
}
TensorView CausalLM::flat_grads() {
  GT_CHECK(owned_, family_, "::flat_grads(): the gradients live in an external ParameterStore");
  return view(owned_->grads(), {layout_.total()});
}
void CausalLM::zero_grads() { ops_.zero(flat_grads()); }

TensorView CausalLM::param(const std::string& name) {
  GT_CHECK(owned_, family_, "::param(): the parameters live in an external ParameterStore");
  return shaped(owned_->params() + layout_.at(name).offset, ops_.device(), layout_.at(name));
}

TensorView CausalLM::p(const std::string& name) {
  const ParamSpec& s = layout_.at(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  return shaped(store_->unit_params(s.unit) + (s.offset - u.begin), ops_.device(), s);
}

TensorView CausalLM::residual_grad_copy(const Buffer& copy, const RowParallelLinear& layer,
                                        const TensorView& w) const {
  if (copy.bytes() == 0 || layer.uses_fp8(w)) return {};
  return aview(copy, {int64_t(B_) * T_ / shards_, cfg_.n_embd});
}

TensorView CausalLM::param_shape(const std::string& name) const {
  return shaped(nullptr, ops_.device(), layout_.at(name));
}

TensorView CausalLM::gemm_param(const std::string& name) {
  // bf16 runs read the store's bf16 copy when it keeps one (kept current by
  // the optimizer); otherwise LinearPrecision casts the fp32 weight or bias
  // per call.
  const uint16_t* copy = nullptr;
  const ParamSpec& s = layout_.at(name);
  if (dtype_ == ComputeDType::bf16) copy = store_->unit_params_bf16(s.unit);
  if (!copy) return p(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  TensorView t = shaped(nullptr, ops_.device(), s);
  t.data = const_cast<uint16_t*>(copy) + (s.offset - u.begin);
  t.dtype = DType::bf16;
  return t;
}

TensorView CausalLM::g(const std::string& name) {
  const ParamSpec& s = layout_.at(name);
  const ParamUnit& u = layout_.units()[static_cast<size_t>(s.unit)];
  return shaped(store_->unit_grads(s.unit) + (s.offset - u.begin), ops_.device(), s);
}

TensorView CausalLM::fused(const std::string& first, const std::string& last,
                           TensorView (CausalLM::*one)(const std::string&)) {
  const auto& specs = layout_.specs();
  const ParamSpec& a = layout_.at(first);
  const ParamSpec& z = layout_.at(last);
  const size_t i0 = static_cast<size_t>(&a - specs.data()),
               i1 = static_cast<size_t>(&z - specs.data());
  GT_CHECK(a.shape.size() == 2 && i0 <= i1, first, " .. ", last,
           " are not matrices in layout order");
  int64_t rows = 0, next = a.offset;
  for (size_t i = i0; i <= i1; ++i) {
    const ParamSpec& s = specs[i];
    // The layout aligns every tensor to 16 elements, so rows * cols must be
    // a multiple of 16 for the next tensor to follow without a gap (the
    // config requires n_embd % 16 == 0 for the families with fused GEMMs).
    GT_CHECK(
        s.unit == a.unit && s.offset == next && s.shape.size() == 2 && s.shape[1] == a.shape[1],
        family_, ": ", s.name, " does not follow ", specs[i - (i > i0 ? 1 : 0)].name,
        " in storage; the fused GEMM over ", first, " .. ", last, " needs them adjacent");
    rows += s.shape[0];
    next += s.numel;
  }
  TensorView v = (this->*one)(first);
  v.shape[0] = rows;
  return v;
}
TensorView CausalLM::p_rows(const std::string& first, const std::string& last) {
  return fused(first, last, &CausalLM::p);
}
TensorView CausalLM::gemm_rows(const std::string& first, const std::string& last) {
  return fused(first, last, &CausalLM::gemm_param);
}
TensorView CausalLM::g_rows(const std::string& first, const std::string& last) {
  return fused(first, last, &CausalLM::g);
}

// ---- Views ------------------------------------------------------------------

// A (rows, ...)-shaped view of layer `layer`'s slot of a per-layer buffer
// whose slots are sized for the maximum (rows, seq); a single slot is every
// layer's.
TensorView CausalLM::layer_act(const LayerBuffer& buf, int layer,
                               std::initializer_list<int64_t> shape) {
  GT_CHECK(layer >= 0 && layer < cfg_.n_layer && buf.slots > 0, "layer ", layer, " of ",
           cfg_.n_layer, " in a buffer of ", buf.slots, " slots");
  const size_t elem = dtype_size(buf.dtype);
  const int64_t per_slot_max = static_cast<int64_t>(buf.buf.bytes() / elem) / buf.slots;
  // Slots count from this stage's first block (the whole model: block 0).
  const int slot = buf.slots == 1 ? 0 : layer - first_layer_;
  GT_CHECK(slot >= 0 && slot < buf.slots, "layer ", layer, " of a stage from block ", first_layer_,
           " in a buffer of ", buf.slots, " slots");
  TensorView v = make_view(static_cast<char*>(buf.buf.data()) + slot * per_slot_max * elem,
                           buf.dtype, ops_.device(), shape);
  GT_CHECK(v.numel() <= per_slot_max, "layer activation ", v.shape_str(), " exceeds its slot of ",
           per_slot_max, " elements");
  return v;
}

DType CausalLM::logits_dtype() const {
  return dtype_ == ComputeDType::bf16 ? DType::bf16 : DType::f32;
}
TensorView CausalLM::logits_view(int64_t rows, int64_t cols) const {
  return make_view(ends_.logits.data(), logits_dtype(), ops_.device(), {rows, cols});
}

TensorView CausalLM::view(float* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::f32, ops_.device(), shape);
}
TensorView CausalLM::aview(const Buffer& b, std::initializer_list<int64_t> shape) const {
  TensorView v = make_view(b.data(), act_dtype_, ops_.device(), shape);
  GT_CHECK(v.numel() * int64_t(dtype_size(act_dtype_)) <= int64_t(b.bytes()), "activation view ",
           v.shape_str(), " does not fit its ", b.bytes(), "-byte buffer");
  return v;
}
TensorView CausalLM::iview(int32_t* p, std::initializer_list<int64_t> shape) const {
  return make_view(p, DType::i32, ops_.device(), shape);
}
TensorView CausalLM::own_rows(TensorView full) const { return parallel_->maps().own_rows(full); }

// ---- Forward, losses, logits -----------------------------------------------

float CausalLM::forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                        float grad_scale) {
  check_stage_set("forward");
  if (!run_forward(tokens, targets, B, T, grad_scale)) return 0.f;
  return read_forward_loss(B, T);
}

bool CausalLM::queue_forward(const int32_t* tokens, const int32_t* targets, int B, int T,
                             float grad_scale) {
  check_stage_set("forward");
  return run_forward(tokens, targets, B, T, grad_scale);
}

float CausalLM::read_forward_loss(int B, int T) {
  const int64_t R = int64_t(B) * T;
  ops_.download(host_losses_.data(), view(ends_.losses.f32(), {R}));
  double sum = 0.0;
  for (int64_t i = 0; i < R; ++i) sum += host_losses_[static_cast<size_t>(i)];
  return static_cast<float>(sum / static_cast<double>(R));
}

void CausalLM::forward_train(const int32_t* tokens, const int32_t* targets, int B, int T,
                             float grad_scale) {
  GT_CHECK(targets, family_, "::forward_train needs targets");
  check_stage_set("forward");
  if (!heads()) {  // a stage before the last: no loss here
    run_forward(tokens, targets, B, T, grad_scale);
    return;
  }
  const int64_t R = int64_t(B) * T;
  GT_CHECK(pending_losses_ == 0 || pending_rows_ == R, family_, "::forward_train: ", R,
           " rows after micro-batches of ", pending_rows_, " (take_loss() in between)");
  run_forward(tokens, targets, B, T, grad_scale);
  const TensorView losses = view(ends_.losses.f32(), {R});
  const TensorView sum = view(ends_.loss_sum.f32(), {R});
  if (pending_losses_ == 0)
    ops_.copy(sum, losses);
  else
    ops_.accumulate(sum, losses);
  pending_rows_ = R;
  ++pending_losses_;
}

TensorView CausalLM::pending_loss_sums() {
  GT_CHECK(pending_losses_ > 0, "pending_loss_sums(): no forward_train() since take_loss()");
  return view(ends_.loss_sum.f32(), {pending_rows_});
}

double CausalLM::take_loss() {
  if (pending_losses_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const int64_t R = pending_rows_;
  std::vector<float> sums(static_cast<size_t>(R));
  ops_.download(sums.data(), view(ends_.loss_sum.f32(), {R}));
  double sum = 0.0;
  for (float v : sums) sum += v;
  const double mean = sum / (static_cast<double>(R) * pending_losses_);
  pending_losses_ = 0;
  return mean;
}

void CausalLM::set_pipeline_stage(const PipelineStage& stage) {
  const int end = stage.end_layer < 0 ? cfg_.n_layer : stage.end_layer;
  if (stage.first_layer < 0 || end > cfg_.n_layer || stage.first_layer >= end)
    fail(family_, ": pipeline stage of blocks [", stage.first_layer, ", ", end,
         ") is not a non-empty span of the model's ", cfg_.n_layer, " blocks");
  // A layout of a pipeline rank's chunks (ParameterLayout's StageSpan, one
  // or several) holds only those blocks, so the stage must be one of them;
  // the whole model's serves any stage.
  if (!layout_.whole_model() && !is_layout_chunk(stage.first_layer, end))
    fail(family_, ": pipeline stage of blocks [", stage.first_layer, ", ", end,
         ") is not one of the parameter layout's chunks ", describe_chunks());
  // Once sized (sized_blocks_ > 0), within what the activations hold.
  if (sized_blocks_ > 0 &&
      (end - stage.first_layer > sized_blocks_ || (end == cfg_.n_layer && !sized_head_)))
    fail(family_, ": pipeline stage of blocks [", stage.first_layer, ", ", end,
         ") on a model whose activations were sized for ", sized_blocks_, " blocks",
         sized_head_ ? "" : " without the LM head", " (build it for that chunk)");
  first_layer_ = stage.first_layer;
  end_layer_ = end;
}

bool CausalLM::is_layout_chunk(int first_layer, int end_layer) const {
  for (const StageSpan& c : layout_.chunks())
    if (c.first_layer == first_layer && c.end_layer == end_layer) return true;
  return false;
}

std::string CausalLM::describe_chunks() const {
  std::string out;
  for (const StageSpan& c : layout_.chunks())
    out += detail::concat(out.empty() ? "" : " ", "[", c.first_layer, ", ", c.end_layer, ")");
  return out;
}

void CausalLM::check_stage_set(const char* what) const {
  if (!stage_set())
    fail(family_, ": ", what, " on a parameter layout of ", layout_.chunks().size(),
         " pipeline chunks (", describe_chunks(),
         ") before set_pipeline_stage() chose which one this model runs");
}

void CausalLM::set_router_bias(TensorView) {
  fail(family_, ": model.arch=", to_string(cfg_.arch), " has no routers to bias");
}

CausalLM::StageBoundary CausalLM::stage_boundary(int B, int T) {
  GT_CHECK(B >= 1 && B <= max_rows_ && T >= 1 && T <= max_seq_, "B=", B, " T=", T);
  check_stage_set("stage_boundary");
  StageBoundary b = boundary_views(B, T);
  if (embeds()) b.input = b.input_grad = b.router_in = TensorView{};
  if (heads()) b.output = b.output_grad = b.router_out = TensorView{};
  if (embeds() && heads()) b.router_totals = TensorView{};
  return b;
}

CausalLM::StageBoundary CausalLM::residual_boundary(const Buffer& encoded, const LayerBuffer& res3,
                                                    const Buffer& dresidual, int B, int T) {
  const int64_t Rl = int64_t(B) * T / shards_, C = cfg_.n_embd;
  StageBoundary b;
  b.input = aview(encoded, {Rl, C});
  b.output = layer_act(res3, end_layer_ - 1, {Rl, C});
  b.output_grad = b.input_grad = view(dresidual.f32(), {Rl, C});
  return b;
}

void CausalLM::backward() {
  GT_CHECK(backward_ready_, "backward() needs a forward() with targets and grad_scale > 0");
  backward_ready_ = false;
  run_backward();
}

const float* CausalLM::logits() {
  GT_CHECK(!backward_ready_, family_, "::logits(): the logits were overwritten by their gradient");
  GT_CHECK(shards_ == 1, family_, "::logits(): the logits are split over ", shards_, " tp ranks");
  const int64_t R = int64_t(B_) * T_, V = cfg_.vocab_size, Vp = cfg_.padded_vocab_size();
  host_logits_.resize(static_cast<size_t>(R * Vp));
  if (logits_dtype() == DType::f32) {
    ops_.download(host_logits_.data(), logits_view(R * Vp, 1));
  } else {
    std::vector<uint16_t> bits(static_cast<size_t>(R * Vp));
    ops_.download(bits.data(), logits_view(R * Vp, 1));
    for (size_t i = 0; i < bits.size(); ++i) host_logits_[i] = bf16_to_float(bits[i]);
  }
  // Drop the padding columns in place: row r moves down to r * V.
  for (int64_t r = 1; r < R; ++r)
    std::copy(host_logits_.begin() + r * Vp, host_logits_.begin() + r * Vp + V,
              host_logits_.begin() + r * V);
  host_logits_.resize(static_cast<size_t>(R * V));
  return host_logits_.data();
}

}  // namespace gt
