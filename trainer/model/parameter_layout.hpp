// ParameterLayout: every GPT-2 parameter as a named slice of one flat fp32
// buffer. Names are the HF GPT-2 names without the "transformer." prefix
// ("h.3.attn.c_attn.weight"), so checkpoints, safetensors export and error
// messages all speak the name a user finds in transformers.
//
// Storage is (out, in) like torch.nn.Linear; HF stores its Conv1D weights
// (c_attn, c_proj, c_fc) as (in, out), which `hf_transposed` marks for the
// import/export code.
//
// Tensor parallelism: a layout is built for one tp rank and holds that rank's
// shard of every parameter, cut as the model family's placement table says
// (trainer/parallelize/gpt2_placement.cpp: split, gradient, decay, init and
// HF layout of every parameter in one table). With tp = 1 every shard is the
// whole tensor. wte is stored padded to ModelConfig::padded_vocab_size() rows
// (pad_rows: zero, masked in the loss, never exported).
//
// Units: the parameters are grouped into contiguous flat ranges that FSDP
// shards and gathers as one piece: "embed" (wte, wpe), one per block "h.<l>",
// and "head" (ln_f). Each unit's end is padded to a multiple of
// unit_multiple elements so that it splits evenly into that many shards.
//
// Pipeline stages (parallel.pp): a layout can hold only the units of one
// stage, blocks [first_layer, end_layer): "embed" on the first stage, the
// blocks, "head" on the last. With tied embeddings the last stage's LM head
// reads wte too, so it holds its own copy of the embed unit, marked `mirror`
// (unit and specs): the same names and values, its gradient the last
// stage's share, to be summed with the first stage's; never saved nor
// exported (the first stage owns the tensor). A stage's flat order stays the
// reverse of its backward order: [embed] blocks [mirror head]. The
// whole-model layout is the stage [0, n_layer) and unchanged by this.
//
// Several chunks (interleaved_1f1b's virtual stages: pipeline rank r holds
// the chunks of stages r, r + p, ...): one layout, one flat buffer, for all
// of a rank's chunks, given in increasing block order. Units: [embed if a
// chunk starts at block 0] the blocks of every chunk in increasing layer
// order [mirror if tied, a chunk ends at n_layer and none starts at 0]
// [head if a chunk ends at n_layer]. What holds of the order: one
// micro-batch's backward on this rank runs its chunks last to first (chunk
// k's backward waits on stage k*p + r + 1, which waits on chunk k + 1's), each
// chunk's units in reverse flat order, so the flat order is still the reverse
// of one micro-batch's backward order. Across micro-batches the chunks'
// backwards interleave, so a unit's gradient is final only after its own
// chunk's last micro-batch. One exception: a rank holding both the first and
// the last chunk of a tied model (p = 1) reads "embed" from two chunks (the
// tied LM head, then the embedding): embed_read_by_two_chunks().
// first_layer()/end_layer() are the one chunk's span and refused on a
// layout of several chunks: use chunks().
//
// Expert parallelism (parallel.ep > 1, ExpertShard): a rank stores only its
// ep rank's E/ep experts of each block (experts [rank * E/ep, (rank + 1) *
// E/ep)), the others are held elsewhere. They leave the block's unit for an
// expert unit of their own per block ("layers.<l>.block_sparse_moe.experts":
// every local w1|w3 pair, then every local w2), since they are reduced and
// sharded over other ranks (the expert-data-parallel group) than the rest of
// the model. The whole layout (LayoutPart::all, what the model reads) lists
// the expert units after all others; the two parts the sharded state keeps
// apart each hold one kind, with the same offsets within every unit:
// LayoutPart::dense the units without the experts (numbered as in the whole
// layout), LayoutPart::experts the expert units alone, as its "blocks"
// (block_unit(l) is block l's expert unit there; no embed, no head). At ep =
// 1 every block keeps its experts and there is one part, the whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "trainer/config/config.hpp"
#include "trainer/parallelize/placement.hpp"

namespace gt {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;         // this rank's storage shape, (out, in) for matrices
  std::vector<int64_t> global_shape;  // the whole tensor's shape
  int64_t offset = 0;                 // in elements, into the flat buffer
  int64_t numel = 0;                  // of `shape`
  bool decay = false;                 // AdamW weight decay: 2-D weights only
  bool hf_transposed = false;         // HF Conv1D layout is shape reversed
  int layer = -1;                     // block index, -1 outside the blocks
  int unit = 0;                       // index into ParameterLayout::units()
  TpSplit split = TpSplit::replicated;        // as cut at this layout's tp (replicated at 1)
  TpRole role = TpRole::sequence_replicated;  // the placement's role, whatever the tp
  int parts = 1;                      // rows split: independent equal groups (q|k|v = 3)
  bool tp_partial_grad = false;       // gradient must be summed over the tp ranks
  Init init = Init::zeros;            // initial values (for_each_initial_parameter)
  // Trailing rows of global_shape that are padding (wte: the vocabulary
  // rounded up). They stay zero in training; HF import and export skip them.
  int64_t pad_rows = 0;
  bool mirror = false;  // in the last stage's copy of the embed unit
  int64_t real_rows() const { return global_shape[0] - pad_rows; }
  // The shape checkpoints hold: global_shape without the padding rows, so a
  // checkpoint resumes at a tp that pads the vocabulary differently.
  std::vector<int64_t> saved_shape() const {
    std::vector<int64_t> s = global_shape;
    s[0] -= pad_rows;
    return s;
  }
};

struct ParamUnit {
  std::string name;   // "embed", "h.3", "head"
  int64_t begin = 0;  // flat range [begin, end), end padded to unit_multiple
  int64_t end = 0;
  bool mirror = false;  // the last pipeline stage's copy of "embed" (tied head)
  bool experts = false;  // a block's local experts, at ep > 1
  int64_t size() const { return end - begin; }
};

// The experts a rank stores (parallel.ep; see the header): rank `rank` of
// `ep`, ep dividing the model's n_experts. ep = 1: every expert.
struct ExpertShard {
  int ep = 1;
  int rank = 0;
};
// Which units a layout holds at ep > 1 (see the header).
enum class LayoutPart { all, dense, experts };

// The blocks [first_layer, end_layer) of one pipeline stage; end_layer -1
// means n_layer. The default is the whole model.
struct StageSpan {
  int first_layer = 0;
  int end_layer = -1;
};

class ParameterLayout {
 public:
  // The layout of tp rank `tp_rank` of `tp`; units padded to `unit_multiple`.
  explicit ParameterLayout(const ModelConfig& m, int tp = 1, int tp_rank = 0,
                           int unit_multiple = 1);
  // The same for the units pipeline stage `span` holds; throws naming the
  // numbers unless it is a non-empty span of the model's blocks.
  ParameterLayout(const ModelConfig& m, StageSpan span, int tp = 1, int tp_rank = 0,
                  int unit_multiple = 1);
  // The units of the pipeline chunks `chunks` one rank holds (interleaved
  // 1F1B: several, in increasing block order). Throws naming the numbers
  // unless each is a non-empty span of the model's blocks, after the one
  // before it; the one-chunk case is the constructor above.
  // experts, part: expert parallelism's storage (see the header); at ep = 1
  // the part must be `all`.
  ParameterLayout(const ModelConfig& m, const std::vector<StageSpan>& chunks, int tp = 1,
                  int tp_rank = 0, int unit_multiple = 1, ExpertShard experts = {},
                  LayoutPart part = LayoutPart::all);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const std::vector<ParamUnit>& units() const { return units_; }
  int64_t total() const { return total_; }
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }
  // Throws unless this layout was built for tp rank `rank` of `size`.
  void check_built_for(int size, int rank) const;
  const ParamSpec& at(const std::string& name) const;  // throws naming the parameter
  const ParamSpec* find(const std::string& name) const;
  // Unit indices, -1 for a unit this stage does not hold. embed_unit() is
  // where this stage reads the embedding: "embed", or on the last stage of a
  // tied model its mirror. The whole model: embed 0, block l at 1 + l, head
  // last.
  int embed_unit() const { return embed_unit_; }
  // Block l's unit, -1 unless one of the chunks holds block l.
  int block_unit(int layer) const {
    return layer >= 0 && layer < static_cast<int>(block_units_.size())
               ? block_units_[static_cast<size_t>(layer)]
               : -1;
  }
  int head_unit() const { return head_unit_; }
  // Block l's expert unit at ep > 1 on an `all` layout, -1 otherwise (no
  // such unit, or the block is not held).
  int expert_unit(int layer) const {
    return layer >= 0 && layer < static_cast<int>(expert_units_.size())
               ? expert_units_[static_cast<size_t>(layer)]
               : -1;
  }
  const ExpertShard& experts() const { return experts_; }
  LayoutPart part() const { return part_; }
  // The unit of the lowest block held: the block units are consecutive
  // from it, in layer order (over every chunk).
  int first_block_unit() const { return first_block_unit_; }
  // The chunks this layout holds, in block order, end_layer resolved (never
  // -1): one for a stage layout and the whole model, several for a rank of
  // an interleaved pipeline.
  const std::vector<StageSpan>& chunks() const { return chunks_; }
  // The blocks [first_layer, end_layer) of a one-chunk layout; throws on a
  // layout of several chunks, whose blocks are no one span (use chunks()).
  int first_layer() const { return one_chunk().first_layer; }
  int end_layer() const { return one_chunk().end_layer; }
  bool whole_model() const { return whole_; }
  // A tied model whose first and last chunks are both here, apart (p = 1
  // with several chunks): "embed" is read, and its gradient written, by the
  // last chunk's LM head and the first chunk's embedding, so its backward
  // comes twice per micro-batch, at both ends of the flat order.
  bool embed_read_by_two_chunks() const { return embed_two_chunks_; }
  // Whether `name` is a parameter of the model, held by this stage or not.
  bool in_model(const std::string& name) const {
    return find(name) != nullptr || elsewhere_.count(name) > 0;
  }
  // Parameters in the full model (global shapes, wte counted once: tied),
  // without the vocabulary padding: GPT-2 124M is 124,439,808 as in HF. On
  // a stage layout, those the stage owns (not its mirror).
  int64_t global_numel() const;

  // Global (row, col) of this rank's element (local_row, local_col) of `s`,
  // the tensor viewed as 2-D (a 1-D tensor of N elements is (N, 1)).
  int64_t global_row(const ParamSpec& s, int64_t local_row) const;
  int64_t global_col(const ParamSpec& s, int64_t local_col) const;

 private:
  const StageSpan& one_chunk() const;
  void check_chunks(const ModelConfig& m) const;
  void add(const PlacedParameter& p, bool mirror);
  int add_unit(const PlacedUnit& unit, int unit_multiple, bool mirror, bool experts = false);
  // Whether a placed parameter is stored in this layout's units (experts of
  // other ep ranks are not; each part holds its kind).
  bool stores(const PlacedParameter& p, bool expert_unit) const;
  std::vector<ParamSpec> specs_;
  std::vector<ParamUnit> units_;
  std::unordered_map<std::string, size_t> index_;
  std::unordered_set<std::string> elsewhere_;  // the model's names other stages hold
  int64_t total_ = 0;
  int tp_ = 1, tp_rank_ = 0;
  int n_experts_ = 0;
  std::vector<StageSpan> chunks_;  // end_layer resolved
  std::vector<int> block_units_;   // per layer of the model: its unit, or -1
  std::vector<int> expert_units_;  // per layer: its expert unit (all, ep > 1), or -1
  ExpertShard experts_;
  LayoutPart part_ = LayoutPart::all;
  bool whole_ = true;
  bool embed_two_chunks_ = false;
  int embed_unit_ = -1, head_unit_ = -1, first_block_unit_ = 0;
};

// The values of every parameter at initialisation, each by its placement's
// Init rule (HF GPT2 _init_weights: weights N(0, 0.02), residual projections
// (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2*n_layer)), biases 0, LayerNorm
// weight 1 and bias 0). Deterministic in `seed` on every platform and for every layout:
// `fn(spec, data)` is called once per parameter of the tp = 1 layout, in
// layout order, with the whole (global) tensor.
void for_each_initial_parameter(const ModelConfig& m, uint64_t seed,
                                const std::function<void(const ParamSpec&, const float*)>& fn);
// One-rank convenience: fills `params` laid out by the tp = 1 `layout`.
void init_gpt2_parameters(const ParameterLayout& layout, int n_layer, uint64_t seed,
                          float* params);

}  // namespace gt
