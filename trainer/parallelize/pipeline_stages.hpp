// Pipeline stages: how many transformer blocks each model chunk holds.
// With p pipeline ranks and v virtual stages the model is cut into S = p * v
// chunks of consecutive blocks, chunk c being global stage c, run on rank
// c % p (pipeline_schedule.hpp). Chunk 0 also holds the embedding, chunk
// S - 1 the final norm, the LM head and the loss.
//
// The default split balances work, not block counts: the embedding is a
// lookup (counted as no work), while the LM head is a V x C matmul (V the
// padded vocabulary) that weighs as much as lm_head_block_equivalents()
// blocks: V * C over one block's matmul weights (the same count as
// block_matmuls() in trainer/profile/model_flops.hpp; attention, norms and
// the loss are left out of both, so the head's share is a little high when
// attention is a large part of a block). The last chunk gets n_last blocks
// and the others share the rest as evenly as integers allow, with n_last
// chosen to minimise the heaviest chunk's work, max(ceil(rest / (S - 1)),
// n_last + head), every chunk holding at least one block; among equal
// maxima the largest n_last wins (the other chunks then hold fewer blocks).
// The rest's remainder goes one block each to the chunks just before the
// last (S - 2, S - 3, ...): under 1F1B the early stages hold the most
// micro-batches of activations, so extra blocks cost least late. The rule is
// deterministic: every rank computes the same split from the config.
#pragma once

#include <vector>

#include "trainer/config/config.hpp"

namespace gt {

// Blocks per chunk in stage order (p * v entries, each >= 1, adding up to
// model.n_layer). An explicit `pp_layers` (parallel.pp_layers) is returned
// as given once checked; empty = the balanced split above. Throws gt::Error
// naming the numbers when pp or v is < 1, when p * v chunks cannot each hold
// a block, or when pp_layers has the wrong length, an entry < 1 or the wrong
// sum.
std::vector<int> pipeline_layer_split(const ModelConfig& m, int pp, int virtual_stages,
                                      const std::vector<int>& pp_layers);

// The weights of one block's matmuls, counted from the family's placement
// table (every 2-D parameter of block 0): 12 C^2 for GPT-2, C (Q + 2K) + Q C
// + 3 C F for Llama.
double block_matmul_weights(const ModelConfig& m);

// The LM head's matmul (padded vocabulary x channels) in blocks of work.
double lm_head_block_equivalents(const ModelConfig& m);

// Blocks each pipeline rank holds: the sum of its v chunks (r, r + p, ...).
std::vector<int> pipeline_rank_blocks(const std::vector<int>& split, int pp);

}  // namespace gt
