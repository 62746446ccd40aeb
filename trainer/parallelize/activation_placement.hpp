// Where an activation lives on the mesh, carried with it (JAX's "sharding
// in types"): for each axis that cuts activations (tp and cp), whether this
// rank holds all of the tensor (replicated), its share along a named
// dimension (sharded: the sequence, the hidden features, the attention
// heads or the vocabulary), or a partial sum that the axis's ranks must add
// up. An Activation is a view plus that placement plus a name for messages.
//
// Who sets it, who checks it:
//   * every tensor-parallel and context-parallel layer and mapping
//     (tp_layers.hpp, tp_mappings.hpp, context_parallel.hpp) states the
//     placements it accepts and checks them at entry, before any arithmetic,
//     failing with one line that names the layer, the tensor and the
//     expected and actual placements; what it writes it returns with the
//     placement it gives (a gather turns shard(sequence) into replicated, a
//     reduce-scatter partial into shard(sequence), and so on);
//   * the model (trainer/model) starts the chain from the embedding's output
//     and passes each layer what the previous one returned; a per-position
//     op (norms, residual adds, RoPE, activations) keeps its input's
//     placement (`rowwise`).
// Placements do not depend on the degrees: at tp = 1 or cp = 1 the same
// placements flow and are checked (a one-rank run checks the data flow a
// layout would have), only the collectives are no-ops. kernels/ stays below
// the mesh and knows nothing of this.
#pragma once

#include <string>

#include "kernels/core/tensor.hpp"

namespace gt {

// The dimension a mesh axis cuts an activation along.
enum class ActDim { sequence, hidden, heads, vocabulary };
const char* to_string(ActDim d);  // "sequence", "hidden", "heads", "vocabulary"

// How one mesh axis holds an activation.
struct AxisPlacement {
  enum class Kind { replicated, sharded, partial };
  Kind kind = Kind::replicated;
  ActDim dim = ActDim::sequence;  // what `sharded` cuts

  static AxisPlacement replicated() { return {}; }
  static AxisPlacement shard(ActDim d) { return {Kind::sharded, d}; }
  static AxisPlacement partial() { return {Kind::partial, ActDim::sequence}; }
  bool operator==(const AxisPlacement& o) const {
    return kind == o.kind && (kind != Kind::sharded || dim == o.dim);
  }
  bool operator!=(const AxisPlacement& o) const { return !(*this == o); }
  std::string str() const;  // "replicated", "shard(sequence)", "partial"
};

// The placement on the two axes that cut activations.
struct ActivationPlacement {
  AxisPlacement tp, cp;
  bool operator==(const ActivationPlacement& o) const { return tp == o.tp && cp == o.cp; }
  bool operator!=(const ActivationPlacement& o) const { return !(*this == o); }
  std::string str() const;  // "{tp: shard(sequence), cp: shard(sequence)}"
};

// The residual stream's (and every per-position tensor's between blocks):
// this rank's rows, cut along the sequence by both axes.
inline ActivationPlacement sequence_shard() {
  return {AxisPlacement::shard(ActDim::sequence), AxisPlacement::shard(ActDim::sequence)};
}

struct Activation {
  TensorView view;
  ActivationPlacement placement;
  std::string name;  // "h.0.ln_1" in messages

  // The same tensor seen through another shape of the same memory.
  Activation as(TensorView v) const { return {v, placement, name}; }
};

// Where a layer writes its output: the view, and the name the Activation it
// returns will carry (the layer gives the placement).
struct Target {
  TensorView view;
  std::string name;
};

// The same placement on another view: a per-position op's output.
inline Activation rowwise(TensorView out, const Activation& in, std::string name) {
  return {out, in.placement, std::move(name)};
}

class PlacementLog;

// The residual stream's add, out = a + b: both addends must be cut alike
// (a partial sum added to a shard would be the missing reduce-scatter);
// checked, recorded under `layer`, the sum returned with their placement.
Activation added(TensorView out, const Activation& a, const Activation& b, std::string name,
                 const std::string& layer, PlacementLog* log);

// Records every placement checked or given (the table of docs/
// ARCHITECTURE.md is written from one, tests/mpi/test_placement_table_mpi.cpp).
// Not owned by the layers; null: nothing recorded.
class PlacementLog {
 public:
  virtual ~PlacementLog() = default;
  // `layer` ("c_attn forward"), `role` ("input", "output", ...), the tensor.
  virtual void record(const std::string& layer, const char* role, const Activation& a) = 0;
};

// The check every layer makes at entry: throws gt::Error, one line,
//   "<layer>: <role> '<name>' is {tp: .., cp: ..}; expected {tp: .., cp: ..}"
// unless a.placement == want. Records the tensor in `log` (may be null).
void expect_placement(const Activation& a, const ActivationPlacement& want, const std::string& layer,
                      const char* role, PlacementLog* log);
// The same for one axis only (the other may be anything: a layer of one
// axis passes the other's placement through).
void expect_tp(const Activation& a, const AxisPlacement& want, const std::string& layer,
               const char* role, PlacementLog* log);
void expect_cp(const Activation& a, const AxisPlacement& want, const std::string& layer,
               const char* role, PlacementLog* log);
// What a layer gives: `a` recorded as its output (returns it).
Activation given(Activation a, const std::string& layer, const char* role, PlacementLog* log);

}  // namespace gt
