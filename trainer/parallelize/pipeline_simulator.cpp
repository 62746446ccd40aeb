#include "trainer/parallelize/pipeline_simulator.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>

namespace gt {

double PipeSimulation::bubble_fraction() const {
  if (makespan <= 0) return 0;
  double worst = 0;
  for (double b : busy) worst = std::max(worst, (makespan - b) / makespan);
  return worst;
}

namespace {
struct Message {
  int micro, stage;
  double ready;
};
}  // namespace

// NCCL matches a pair's point-to-point messages in issue order, with no
// tags: between any two ranks, in each direction, the sender's sends (of
// either kind) must come in the order of the receiver's receives. "" when
// they do, else the first mismatch.
std::string check_pipeline_pair_order(const std::vector<std::vector<PipeAction>>& lists) {
  const int p = static_cast<int>(lists.size());
  auto is_send = [](PipeOp op) { return op == PipeOp::send_act || op == PipeOp::send_grad; };
  auto is_recv = [](PipeOp op) { return op == PipeOp::recv_act || op == PipeOp::recv_grad; };
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to) {
      if (from == to) continue;
      std::vector<const PipeAction*> sends, recvs;
      for (const PipeAction& a : lists[static_cast<size_t>(from)])
        if (is_send(a.op) && a.peer == to) sends.push_back(&a);
      for (const PipeAction& a : lists[static_cast<size_t>(to)])
        if (is_recv(a.op) && a.peer == from) recvs.push_back(&a);
      for (size_t i = 0; i < std::max(sends.size(), recvs.size()); ++i) {
        const PipeAction* s = i < sends.size() ? sends[i] : nullptr;
        const PipeAction* r = i < recvs.size() ? recvs[i] : nullptr;
        const bool same = s && r && s->micro == r->micro && s->stage == r->stage &&
                          (s->op == PipeOp::send_act) == (r->op == PipeOp::recv_act);
        if (!same)
          return "message " + std::to_string(i) + " from rank " + std::to_string(from) +
                 " to rank " + std::to_string(to) + ": sent " + (s ? s->str() : "nothing") +
                 ", received as " + (r ? r->str() : "nothing") +
                 " (untagged point-to-point matches in issue order)";
      }
    }
  return "";
}

PipeSimulation simulate_pipeline(const std::vector<std::vector<PipeAction>>& lists,
                                 int virtual_stages, const PipeCosts& costs) {
  const int p = static_cast<int>(lists.size());
  PipeSimulation sim;
  sim.busy.assign(static_cast<size_t>(p), 0.0);
  sim.max_in_flight.assign(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0.0);
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<int> in_flight(static_cast<size_t>(p), 0);
  // (sender, receiver, is_grad) -> messages in send order.
  std::map<std::tuple<int, int, bool>, std::deque<Message>> channels;
  std::set<std::pair<int, int>> forwarded, backwarded;  // (micro, stage)
  const double v = virtual_stages;

  auto fail_with = [&](const std::string& why) {
    sim.problem = why;
    return sim;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = lists[static_cast<size_t>(r)];
      auto& i = pc[static_cast<size_t>(r)];
      double& now = clock[static_cast<size_t>(r)];
      while (i < list.size()) {
        const PipeAction& a = list[i];
        const std::string where =
            "rank " + std::to_string(r) + " action " + std::to_string(i) + " (" + a.str() + ")";
        if (a.op == PipeOp::forward || a.op == PipeOp::backward) {
          const auto key = std::make_pair(a.micro, a.stage);
          if (a.op == PipeOp::forward) {
            if (!forwarded.insert(key).second) return fail_with(where + ": forwarded twice");
            sim.max_in_flight[static_cast<size_t>(r)] = std::max(
                sim.max_in_flight[static_cast<size_t>(r)], ++in_flight[static_cast<size_t>(r)]);
          } else {
            if (!forwarded.count(key)) return fail_with(where + ": backward before its forward");
            if (!backwarded.insert(key).second) return fail_with(where + ": backwarded twice");
            --in_flight[static_cast<size_t>(r)];
          }
          const double t = (a.op == PipeOp::forward ? costs.forward : costs.backward) / v;
          now += t;
          sim.busy[static_cast<size_t>(r)] += t;
        } else if (a.op == PipeOp::send_act || a.op == PipeOp::send_grad) {
          channels[{r, a.peer, a.op == PipeOp::send_grad}].push_back(
              {a.micro, a.stage, now + costs.latency});
        } else {
          auto& ch = channels[{a.peer, r, a.op == PipeOp::recv_grad}];
          if (ch.empty()) break;  // blocked: try the other ranks
          const Message msg = ch.front();
          if (msg.micro != a.micro || msg.stage != a.stage)
            return fail_with(where + ": the channel's next message is micro-batch " +
                             std::to_string(msg.micro) + " for stage " + std::to_string(msg.stage) +
                             " (sent out of order)");
          ch.pop_front();
          now = std::max(now, msg.ready);
        }
        ++i;
        progress = true;
      }
    }
  }
  std::string blocked;
  for (int r = 0; r < p; ++r)
    if (pc[static_cast<size_t>(r)] < lists[static_cast<size_t>(r)].size())
      blocked += (blocked.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " at " +
                 lists[static_cast<size_t>(r)][pc[static_cast<size_t>(r)]].str();
  if (!blocked.empty()) return fail_with("deadlock: " + blocked);
  for (const auto& [key, ch] : channels)
    if (!ch.empty())
      return fail_with("a message from rank " + std::to_string(std::get<0>(key)) + " to rank " +
                       std::to_string(std::get<1>(key)) + " was never received");
  if (forwarded.size() != backwarded.size())
    return fail_with("a forwarded micro-batch was never backwarded");
  // Each kind in order on its own channel is not enough without tags.
  if (std::string order = check_pipeline_pair_order(lists); !order.empty()) return fail_with(order);
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  return sim;
}

}  // namespace gt
