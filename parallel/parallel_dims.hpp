// ParallelDims: the layout pp x dp x fsdp x cp x tp as a validated value type
// (torchtitan's idea). Constructing one checks the product against the world
// size and the degrees against the model, with a message naming every number.
#pragma once

#include <string>

namespace gt {

struct ParallelDims {
  int dp = 1;
  int fsdp = 1;
  int tp = 1;
  int pp = 1;  // pipeline stages (outermost: a pipeline crosses hosts, tp stays in one)
  // Context parallelism: each sequence cut over cp ranks (next to tp, inside
  // fsdp: Llama 3's order), which hold the same data rows' chunks.
  int cp = 1;
  // Expert parallelism, folded out of the data ranks (not a factor of the
  // world size): groups of ep consecutive data ranks (same pp, cp, tp) each
  // hold a different E/ep of every mixture's experts.
  int ep = 1;

  int world_size() const { return pp * dp * fsdp * cp * tp; }
  // Data shards (distinct rows of the global batch): cp ranks share theirs.
  int data_parallel() const { return dp * fsdp; }
  // "dp=2 x fsdp=1 x tp=2 (4 ranks)"; "pp=2 x " first when pp > 1, "cp=2 x "
  // before tp when cp > 1.
  std::string str() const;

  // Throws gt::Error unless pp*dp*fsdp*cp*tp == world_size and every degree
  // >= 1. (Whether tp splits the model is the config's check:
  // tp_split_problem, trainer/config/config.hpp.)
  static ParallelDims validated(int dp, int fsdp, int tp, int world_size, int pp = 1, int cp = 1);
  // This layout with expert parallelism ep; throws gt::Error unless ep >= 1
  // divides the data ranks (dp x fsdp).
  ParallelDims with_expert_parallel(int ep) const;
};

}  // namespace gt
