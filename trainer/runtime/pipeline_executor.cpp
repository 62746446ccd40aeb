#include "trainer/runtime/pipeline_executor.hpp"

#include <algorithm>
#include <limits>

#include "kernels/core/error.hpp"

namespace gt {

namespace {

constexpr int kActTag = 0;   // activations, forward
constexpr int kGradTag = 1;  // their gradients, backward
constexpr int kTiedTag = 2;  // the tied embedding's gradient, once per step
// A mixture's router statistics (stage_boundary's router views), each right
// after the message it travels with: partial sums forward, totals backward.
constexpr int kRouterTag = 3;
constexpr int kRouterTotalsTag = 4;

bool present(const TensorView& v) { return v.data != nullptr && v.numel() > 0; }

double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// For the length of a step or an evaluation: `base` holds the context's
// phase (what the executor names its actions under), put back on every
// exit, returning or throwing.
class PhaseScope {
 public:
  PhaseScope(CollectiveContext* context, std::string& base) : context_(context), base_(base) {
    if (context_) base_ = context_->phase;
  }
  ~PhaseScope() {
    if (context_) context_->phase = base_;
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  CollectiveContext* context_;
  std::string& base_;
};

// Floats of a boundary tensor on the wire (the communicator moves floats;
// a bf16 one goes as half as many).
int64_t wire_floats(const TensorView& view) {
  const int64_t bytes = view.numel() * static_cast<int64_t>(dtype_size(view.dtype));
  GT_CHECK(bytes % 4 == 0, "pipeline boundary of ", bytes, " bytes");
  return bytes / 4;
}

}  // namespace

std::vector<int> instances_per_chunk(const std::vector<PipeAction>& list, int pp,
                                     int virtual_stages) {
  std::vector<int> held(static_cast<size_t>(virtual_stages), 0), most = held;
  for (const PipeAction& a : list) {
    const auto c = static_cast<size_t>(stage_chunk(a.stage, pp));
    if (a.op == PipeOp::forward) most[c] = std::max(most[c], ++held[c]);
    if (a.op == PipeOp::backward) --held[c];
  }
  return most;
}

PipelineExecutor::PipelineExecutor(const PipeScheduleSpec& spec, std::vector<PipeAction> actions,
                                   std::vector<Chunk> chunks, ShardedParameters& params,
                                   const DeviceMesh& mesh, Ops& ops, int B, int T,
                                   CollectiveContext* context)
    : spec_(spec),
      actions_(std::move(actions)),
      last_backward_(actions_.size(), false),
      chunks_(std::move(chunks)),
      params_(params),
      mesh_(mesh),
      pp_(mesh.pp()),
      ops_(ops),
      B_(B),
      T_(T),
      p_(spec.stages),
      rank_(mesh.pp().rank()),
      context_(context),
      tokens_(static_cast<size_t>(B) * T),
      targets_(tokens_.size()) {
  GT_CHECK(pp_.size() == p_, "pipeline executor: schedule of ", p_, " stages on a pp axis of ",
           pp_.size());
  GT_CHECK(static_cast<int>(chunks_.size()) == spec_.virtual_stages,
           "pipeline executor: ", chunks_.size(), " chunks, the schedule has ",
           spec_.virtual_stages);
  size_t slots = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    GT_CHECK(chunks_[c].stage == static_cast<int>(c) * p_ + rank_, "pipeline executor: chunk ", c,
             " of rank ", rank_, " is stage ", chunks_[c].stage);
    GT_CHECK(!chunks_[c].instances.empty(), "pipeline executor: chunk ", c, " has no model");
    std::vector<Instance> row;
    for (auto& m : chunks_[c].instances) row.push_back(Instance{m.get(), {}, -1, 0});
    slots += row.size();
    instances_.push_back(std::move(row));
  }
  // Where each chunk's gradients are final: its last backward of the step.
  std::vector<size_t> last(chunks_.size(), actions_.size());
  for (size_t i = 0; i < actions_.size(); ++i)
    if (actions_[i].op == PipeOp::backward)
      last[static_cast<size_t>(chunk_of(actions_[i].stage))] = i;
  for (size_t i : last)
    if (i < actions_.size()) last_backward_[i] = true;
  // The optimizer's loss view: every instance's per-position sums side by
  // side on the last stage, one zero elsewhere.
  const int64_t R = static_cast<int64_t>(B) * T;
  losses_ = allocate_floats(ops_, last_stage() ? static_cast<int64_t>(slots) * R : 1);
  ops_.zero(losses_.f32_view({losses_.floats()}));
}

PipelineExecutor::~PipelineExecutor() = default;

int PipelineExecutor::chunk_of(int stage) const { return stage_chunk(stage, p_); }

PipelineExecutor::Instance& PipelineExecutor::instance_for(int micro, int stage) {
  auto& row = instances_[static_cast<size_t>(chunk_of(stage))];
  for (Instance& in : row)
    if (in.micro == micro) return in;
  for (Instance& in : row)
    if (in.micro < 0) {
      wait_sends(in);  // its boundary buffers are about to be reused
      in.micro = micro;
      return in;
    }
  fail("pipeline executor: stage ", stage, " holds more micro-batches than its ", row.size(),
       " model instances (micro-batch ", micro, ")");
}

void PipelineExecutor::set_phase(const std::string& what) const {
  if (context_) context_->phase = phase_ + ": pipeline stage " + std::to_string(rank_) + " " + what;
}

CommHandle PipelineExecutor::send(TensorView view, int peer, int tag) {
  return pp_.send(static_cast<const float*>(view.data), wire_floats(view), peer, tag);
}

void PipelineExecutor::recv(TensorView view, int peer, int tag) {
  CommHandle h = pp_.recv(static_cast<float*>(view.data), wire_floats(view), peer, tag);
  const auto t0 = Clock::now();
  h.wait();
  wait_ms_ += ms_between(t0, Clock::now());
}

void PipelineExecutor::wait_sends(Instance& in) {
  if (in.sends.empty()) return;
  const auto t0 = Clock::now();
  for (CommHandle& h : in.sends) h.wait();
  in.sends.clear();
  wait_ms_ += ms_between(t0, Clock::now());  // a send waits on its receiver too
}

void PipelineExecutor::wait_sends() {
  for (auto& row : instances_)
    for (Instance& in : row) wait_sends(in);
}

void PipelineExecutor::run(const PipeAction& a, const FillMicroBatch& fill, float grad_scale,
                           bool last_backward) {
  set_phase(a.str());
  switch (a.op) {
    case PipeOp::recv_act: {
      const auto b = instance_for(a.micro, a.stage).model->stage_boundary(B_, T_);
      recv(b.input, a.peer, kActTag);
      if (present(b.router_in)) recv(b.router_in, a.peer, kRouterTag);
      return;
    }
    case PipeOp::recv_grad: {
      const auto b = instance_for(a.micro, a.stage).model->stage_boundary(B_, T_);
      recv(b.output_grad, a.peer, kGradTag);
      if (present(b.router_totals)) recv(b.router_totals, a.peer, kRouterTotalsTag);
      return;
    }
    case PipeOp::send_act: {  // a.stage is the receiving stage
      Instance& in = instance_for(a.micro, a.stage - 1);
      const auto b = in.model->stage_boundary(B_, T_);
      in.sends.push_back(send(b.output, a.peer, kActTag));
      if (present(b.router_out)) in.sends.push_back(send(b.router_out, a.peer, kRouterTag));
      return;
    }
    case PipeOp::send_grad: {  // a.stage is the receiving stage; the micro-batch is done here
      Instance& in = instance_for(a.micro, a.stage + 1);
      const auto b = in.model->stage_boundary(B_, T_);
      in.sends.push_back(send(b.input_grad, a.peer, kGradTag));
      if (present(b.router_totals))
        in.sends.push_back(send(b.router_totals, a.peer, kRouterTotalsTag));
      in.micro = -1;
      return;
    }
    case PipeOp::forward: {
      Instance& in = instance_for(a.micro, a.stage);
      fill(a.micro, tokens_.data(), targets_.data());
      const auto t0 = Clock::now();
      in.model->forward_train(tokens_.data(), targets_.data(), B_, T_, grad_scale);
      if (in.model->heads()) ++in.forwards;
      if (block_hook_) block_hook_(a.str(), t0, Clock::now());
      return;
    }
    case PipeOp::backward: {
      Instance& in = instance_for(a.micro, a.stage);
      params_.begin_micro_batch(last_backward);
      const auto t0 = Clock::now();
      in.model->backward();
      if (block_hook_) block_hook_(a.str(), t0, Clock::now());
      if (a.stage == 0) in.micro = -1;  // no gradient to send back
      return;
    }
  }
}

void PipelineExecutor::train(int micro_batches, const FillMicroBatch& fill, float grad_scale) {
  if (micro_batches != spec_.micro_batches)
    fail("pipeline executor: a step of ", micro_batches, " micro-batches; the schedule has ",
         spec_.micro_batches);
  const PhaseScope phase(context_, phase_);
  wait_ms_ = 0.0;
  params_.begin_step();
  for (size_t i = 0; i < actions_.size(); ++i)
    run(actions_[i], fill, grad_scale, last_backward_[i]);
  set_phase("sends");
  wait_sends();
  set_phase("gradient reduction");
  params_.finish_gradients();
  sum_tied_embedding_grads();
}

void PipelineExecutor::sum_tied_embedding_grads() {
  const CausalLM& model = *chunks_.front().instances.front();
  if (!model.config().tied_embeddings()) return;
  const ParameterLayout& layout = model.layout();
  const int unit = layout.embed_unit();
  if (unit < 0) return;  // a middle stage
  // wte on the first stage (pipeline rank 0), its mirror on the last (rank
  // p - 1): each sends its share to the other.
  const int peer = layout.units()[static_cast<size_t>(unit)].mirror ? 0 : p_ - 1;
  if (peer == rank_) return;
  set_phase("tied embedding gradient");
  TensorView mine = params_.owned_unit_grads(unit);
  if (tied_peer_.floats() != mine.numel()) tied_peer_ = allocate_floats(ops_, mine.numel());
  TensorView theirs = tied_peer_.f32_view({mine.numel()});
  CommHandle out = pp_.send(mine.f32(), mine.numel(), peer, kTiedTag);
  CommHandle in = pp_.recv(theirs.f32(), mine.numel(), peer, kTiedTag);
  in.wait();
  out.wait();
  // a + b on both sides (addition commutes bit for bit): the copies stay equal.
  ops_.add(mine, mine, theirs);
}

TensorView PipelineExecutor::pending_loss_sums() {
  if (!last_stage()) return losses_.f32_view({1});
  const int64_t R = static_cast<int64_t>(B_) * T_;
  int64_t at = 0;
  for (auto& row : instances_)
    for (Instance& in : row) {
      if (in.model->heads()) {
        TensorView dst = losses_.f32_view({R}, at);
        if (in.forwards > 0)
          ops_.copy(dst, in.model->pending_loss_sums());
        else
          ops_.zero(dst);
      }
      at += R;
    }
  return losses_.f32_view({losses_.floats()});
}

double PipelineExecutor::take_loss() {
  double loss = 0.0;
  if (last_stage()) {
    double sum = 0.0;
    int forwards = 0;
    for (auto& row : instances_)
      for (Instance& in : row) {
        if (in.forwards == 0) continue;
        sum += in.model->take_loss() * in.forwards;
        forwards += in.forwards;
        in.forwards = 0;
      }
    loss = forwards > 0 ? sum / forwards : std::numeric_limits<double>::quiet_NaN();
  }
  // The other stages add 0: a NaN on the last stage stays NaN everywhere.
  return pp_.all_reduce_f64(loss, ReduceOp::sum);
}

double PipelineExecutor::eval_loss_sum(int micro_batches, const FillMicroBatch& fill) {
  // Forward only, one micro-batch at a time through every stage in order
  // (the (micro-batch, stage) order is a chain every rank follows, so no
  // cycle of waits): one instance per chunk, sends waited at once.
  const PhaseScope phase(context_, phase_);
  const int S = p_ * spec_.virtual_stages;
  double sum = 0.0;
  for (int k = 0; k < micro_batches; ++k) {
    fill(k, tokens_.data(), targets_.data());
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const int s = static_cast<int>(c) * p_ + rank_;
      CausalLM& model = *chunks_[c].instances.front();
      if (s > 0) {
        set_phase("eval recv_act " + std::to_string(k) + "@s" + std::to_string(s));
        recv(model.stage_boundary(B_, T_).input, stage_rank(s - 1, p_), kActTag);
      }
      model.queue_forward(tokens_.data(), targets_.data(), B_, T_, 0.f);
      if (s < S - 1) {
        set_phase("eval send_act " + std::to_string(k) + "@s" + std::to_string(s + 1));
        send(model.stage_boundary(B_, T_).output, stage_rank(s + 1, p_), kActTag).wait();
      } else {
        mesh_.drain();  // the forward's collectives, with their deadlines, before the read
        sum += model.read_forward_loss(B_, T_);
      }
    }
  }
  return pp_.all_reduce_f64(last_stage() ? sum : 0.0, ReduceOp::sum);
}

MoeStepStats PipelineExecutor::take_moe_stats() {
  // The step's scalar totals of `from` added into `into`.
  auto add_totals = [](MoeStepStats& into, const MoeStepStats& from) {
    into.experts = from.experts;
    into.aux_sum += from.aux_sum;
    into.micro_batches += from.micro_batches;
    into.dropped += from.dropped;
  };
  MoeStepStats all;
  for (auto& row : instances_) {
    MoeStepStats chunk;  // the chunk's instances summed block by block
    for (Instance& in : row) {
      const MoeStepStats s = in.model->take_moe_stats();
      if (s.experts == 0) continue;  // a dense model
      if (chunk.experts == 0) {
        chunk.counts.assign(s.counts.size(), 0.f);
        chunk.layers = s.layers;
      }
      GT_CHECK(s.counts.size() == chunk.counts.size(), "pipeline executor: instances of one "
               "chunk with ", s.counts.size(), " and ", chunk.counts.size(), " router counts");
      add_totals(chunk, s);
      for (size_t i = 0; i < s.counts.size(); ++i) chunk.counts[i] += s.counts[i];
    }
    if (chunk.experts == 0) continue;
    add_totals(all, chunk);  // the chunks' blocks one after another
    all.counts.insert(all.counts.end(), chunk.counts.begin(), chunk.counts.end());
    all.layers.insert(all.layers.end(), chunk.layers.begin(), chunk.layers.end());
  }
  return all;
}

int64_t PipelineExecutor::activation_bytes() const {
  int64_t bytes = 0;
  for (const Chunk& c : chunks_)
    for (const auto& m : c.instances) bytes += m->activation_bytes();
  return bytes;
}

}  // namespace gt
