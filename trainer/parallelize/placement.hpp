// Placement: how each parameter is laid out across the tensor-parallel ranks,
// and the other per-parameter facts every layer asks (weight decay, the
// initial values, HF's storage order), as data. A model family lists its
// parameters in one table (gpt2_placement.cpp); ParameterLayout
// (trainer/model/) turns that table into this rank's flat buffer, and the
// tensor-parallel layers (tp_layers.hpp), the gradient reducers, the grad
// norm, the checkpoint writer and the planner read the facts from it instead
// of matching parameter names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gt {

// How a parameter's storage is cut across tp ranks.
enum class TpSplit { replicated, rows, cols };

// The part a parameter plays under tensor parallelism (Megatron-LM with
// sequence parallelism). Its split and whether its gradient is a partial sum
// over the tp ranks follow from it.
enum class TpRole {
  // Replicated and applied to this rank's R/p rows only (LayerNorms, wpe):
  // each rank's gradient covers its rows, so the gradient is summed over tp.
  sequence_replicated,
  // Replicated and applied after a reduce-scatter, its gradient taken from the
  // all-gathered output gradient of all rows (row-parallel biases): complete
  // on every rank.
  gathered_replicated,
  // A column-parallel linear's weight or bias: output features (rows of the
  // (out, in) weight) split, in `parts` independent groups (q|k|v = 3).
  column,
  // A row-parallel linear's weight: input features (columns) split.
  row,
  // The vocab-parallel embedding (GPT-2: also the tied LM head): vocabulary
  // rows split; the vocabulary is padded so that tp divides it.
  vocab,
};

enum class Decay { no, yes };  // AdamW's decoupled weight decay
// Initial values (HF's _init_weights): zeros, ones, N(0, 0.02), and the
// residual projections' N(0, 0.02 / sqrt(2 * n_layer)).
enum class Init { zeros, ones, normal, residual_normal };
// HF's storage of the tensor: as ours ((out, in) like torch.nn.Linear) or
// transposed (GPT-2's Conv1D weights are (in, out)).
enum class HfLayout { as_stored, transposed };

struct Placement {
  TpRole role = TpRole::sequence_replicated;
  int parts = 1;  // column: independent equal row groups
  Decay decay = Decay::no;
  Init init = Init::zeros;
  HfLayout hf = HfLayout::as_stored;

  TpSplit split() const;         // rows for column and vocab, cols for row
  bool tp_partial_grad() const;  // sequence_replicated
};

// One parameter of a model family, its shape the whole tensor's.
struct PlacedParameter {
  std::string name;            // HF name without the model prefix
  std::vector<int64_t> shape;  // global, (out, in) for matrices
  int layer = -1;              // block index, -1 outside the blocks
  Placement placement;
  int64_t pad_rows = 0;  // trailing padding rows (the padded vocabulary)
  int expert = -1;       // a mixture's expert it belongs to, -1 for none
};

// Consecutive parameters that FSDP shards and gathers as one piece.
struct PlacedUnit {
  std::string name;  // "embed", "h.3", "head"
  std::vector<PlacedParameter> params;
};

// The replica-owner rule. A parameter replicated over dp (every parameter at
// fsdp = 1, and each fsdp shard across HSDP replicas) and over tp (split
// replicated) has several identical copies; exactly one rank counts it in the
// grad norm and writes it to a checkpoint: dp rank 0, and tp rank 0 for a
// tp-replicated one. Shards over fsdp and tp are disjoint, each its own owner.
bool owns_replica(TpSplit split, int dp_rank, int tp_rank);

}  // namespace gt
