#include "trainer/parallelize/expert_exchange.hpp"

#include <algorithm>
#include <limits>

#include "kernels/core/error.hpp"

namespace gt {

ExpertExchange::ExpertExchange(Ops& ops, const ExpertParallelGroup& ep, int experts,
                               int64_t max_received, int64_t width, DType act, int slots)
    : ops_(ops),
      ep_(ep),
      E_(experts),
      P_(ep.size()),
      El_(ep.size() > 0 ? experts / ep.size() : 0),
      max_received_(max_received),
      C_(width),
      act_(act) {
  GT_CHECK(P_ >= 1 && E_ % P_ == 0, "parallel.ep=", P_, " does not divide the ", E_, " experts");
  GT_CHECK(slots >= 1 && max_received >= 1, "ExpertExchange slots ", slots, " rows ",
           max_received);
  // MPI counts an all-to-all's bytes in int. Refused here, on every rank
  // alike (the same config everywhere), rather than by the one rank whose
  // routing one day receives too much while its peers wait on it.
  const double worst = static_cast<double>(max_local_rows()) * static_cast<double>(width) *
                       static_cast<double>(dtype_size(act));
  if (worst > static_cast<double>(std::numeric_limits<int>::max()))
    fail("parallel.ep=", P_, ": a block's expert exchange could receive ", max_local_rows(),
         " rows of ", width, " ", dtype_name(act), " values (", worst / 1073741824.0,
         " GiB), past the 2 GiB a collective call moves; lower train.micro_batch or set "
         "model.capacity_factor");
  plans_.resize(static_cast<size_t>(slots));
  for (Plan& p : plans_) {
    p.order = alloc(max_local_rows(), DType::i32);
    p.local_offsets = alloc(El_ + 1, DType::i32);
  }
  received_ = alloc(max_local_rows() * C_, act_);
  count_buffer_ = alloc(2 * int64_t(E_), DType::i32);
  host_offsets_.resize(static_cast<size_t>(E_ + 1));
  host_counts_.resize(static_cast<size_t>(2 * E_));
  GT_CHECK(bytes_ == planned_bytes(P_, E_, max_received, width, act, slots),
           "ExpertExchange allocated ", bytes_, " bytes, its plan says ",
           planned_bytes(P_, E_, max_received, width, act, slots));
}

int64_t ExpertExchange::planned_bytes(int ep, int experts, int64_t max_received, int64_t width,
                                      DType act, int slots) {
  auto b = [](int64_t elems, int64_t size) { return std::max<int64_t>(elems, 1) * size; };
  const int64_t M = max_received, El = experts / ep, a = int64_t(dtype_size(act));
  return int64_t(slots) * (b(M, 4) + b(El + 1, 4)) + b(M * width, a) + b(2 * int64_t(experts), 4);
}

Buffer ExpertExchange::alloc(int64_t elems, DType dtype) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elems, 1)) * dtype_size(dtype);
  bytes_ += static_cast<int64_t>(bytes);
  return ops_.allocate(bytes);
}

ExpertExchange::Plan& ExpertExchange::plan_of(int slot) {
  GT_CHECK(slot >= 0 && slot < static_cast<int>(plans_.size()), "expert exchange slot ", slot,
           " of ", plans_.size());
  return plans_[static_cast<size_t>(slot)];
}

std::vector<int64_t> ExpertExchange::elements(const std::vector<int64_t>& rows) const {
  std::vector<int64_t> n(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) n[i] = rows[i] * C_;
  return n;
}

int64_t ExpertExchange::plan(int slot, const TensorView& offsets) {
  Plan& p = plan_of(slot);
  GT_CHECK(offsets.numel() == E_ + 1, "dispatch offsets ", offsets.shape_str(), " for ", E_,
           " experts");
  // The host reads below wait for the device, which may wait for an
  // exchange a device backend (NCCL) only ordered: drain keeps those
  // exchanges' deadlines, so a hung peer fails by name instead of hanging
  // the read.
  ep_.comm->drain();
  // The block's host reads: how many rows go to each expert.
  ops_.download(host_offsets_.data(), offsets);
  int32_t* sent_counts = host_counts_.data();
  int32_t* recv_counts = sent_counts + E_;
  for (int e = 0; e < E_; ++e)
    sent_counts[e] = host_offsets_[static_cast<size_t>(e + 1)] - host_offsets_[static_cast<size_t>(e)];
  // Each rank tells each other how many rows it sends for each of its
  // experts: E/P counts to every rank.
  const TensorView counts = make_view(count_buffer_.data(), DType::i32, ops_.device(), {2 * int64_t(E_)});
  ops_.upload(counts, sent_counts);
  auto* dev = static_cast<int32_t*>(count_buffer_.data());
  const std::vector<int64_t> per_rank(static_cast<size_t>(P_), El_);
  ep_.comm->all_to_all_v(dev, per_rank.data(), dev + E_, per_rank.data(), 4).wait();
  ep_.comm->drain();
  ops_.download(host_counts_.data(), counts);  // both halves; the sent half unchanged
  // recv_counts[q El + j]: rows rank q sends for local expert j.
  p.send_rows.assign(static_cast<size_t>(P_), 0);
  p.recv_rows.assign(static_cast<size_t>(P_), 0);
  std::vector<int32_t> local(static_cast<size_t>(El_ + 1), 0);
  for (int q = 0; q < P_; ++q)
    for (int j = 0; j < El_; ++j) {
      p.send_rows[static_cast<size_t>(q)] += sent_counts[q * El_ + j];
      p.recv_rows[static_cast<size_t>(q)] += recv_counts[q * El_ + j];
      local[static_cast<size_t>(j + 1)] += recv_counts[q * El_ + j];
    }
  for (int j = 0; j < El_; ++j) local[static_cast<size_t>(j + 1)] += local[static_cast<size_t>(j)];
  p.sent = host_offsets_[static_cast<size_t>(E_)];
  p.received = local[static_cast<size_t>(El_)];
  GT_CHECK(p.received <= max_local_rows(), "expert exchange: ", p.received,
           " rows received, buffers hold ", max_local_rows());
  // Received row i (source-major) goes to expert-major row order[i].
  host_order_.resize(static_cast<size_t>(p.received));
  std::vector<int32_t> next(local.begin(), local.end() - 1);  // next free row per local expert
  int64_t i = 0;
  for (int q = 0; q < P_; ++q)
    for (int j = 0; j < El_; ++j)
      for (int32_t t = 0; t < recv_counts[q * El_ + j]; ++t)
        host_order_[static_cast<size_t>(i++)] = next[static_cast<size_t>(j)]++;
  if (p.received > 0)
    ops_.upload(make_view(p.order.data(), DType::i32, ops_.device(), {p.received}),
                host_order_.data());
  ops_.upload(local_offsets(slot), local.data());
  return p.received;
}

TensorView ExpertExchange::local_offsets(int slot) const {
  const Plan& p = plans_.at(static_cast<size_t>(slot));
  return make_view(p.local_offsets.data(), DType::i32, ops_.device(), {int64_t(El_) + 1});
}

void ExpertExchange::dispatch(int slot, const TensorView& rows, const TensorView& local) {
  Plan& p = plan_of(slot);
  GT_CHECK(rows.dtype == act_ && local.dtype == act_ && rows.shape[0] >= p.sent &&
               local.shape[0] >= p.received,
           "expert dispatch: rows ", rows.shape_str(), ", local ", local.shape_str(), " for ",
           p.sent, " sent and ", p.received, " received");
  const std::vector<int64_t> send = elements(p.send_rows), recv = elements(p.recv_rows);
  ep_.comm->all_to_all_v(rows.data, send.data(), received_.data(), recv.data(),
                         static_cast<int>(dtype_size(act_)))
      .wait();
  if (p.received == 0) return;
  const TensorView order = make_view(p.order.data(), DType::i32, ops_.device(), {p.received, 1});
  ops_.moe_permute(make_view(local.data, act_, ops_.device(), {p.received, C_}),
                   make_view(received_.data(), act_, ops_.device(), {p.received, C_}), order);
}

void ExpertExchange::combine(int slot, const TensorView& local, const TensorView& rows) {
  Plan& p = plan_of(slot);
  GT_CHECK(rows.dtype == act_ && local.dtype == act_ && rows.shape[0] >= p.sent &&
               local.shape[0] >= p.received,
           "expert combine: rows ", rows.shape_str(), ", local ", local.shape_str(), " for ",
           p.sent, " sent and ", p.received, " received");
  if (p.received > 0) {
    // received[i] = local[order[i]]: back to the order the rows arrived in.
    const TensorView order =
        make_view(p.order.data(), DType::i32, ops_.device(), {p.received, 1});
    ops_.moe_permute_backward(make_view(received_.data(), act_, ops_.device(), {p.received, C_}),
                              make_view(local.data, act_, ops_.device(), {p.received, C_}), order);
  }
  const std::vector<int64_t> send = elements(p.recv_rows), recv = elements(p.send_rows);
  ep_.comm->all_to_all_v(received_.data(), send.data(), rows.data, recv.data(),
                         static_cast<int>(dtype_size(act_)))
      .wait();
}

}  // namespace gt
