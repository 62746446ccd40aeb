#include "parallel/parallel_dims.hpp"

#include <sstream>

#include "kernels/core/error.hpp"

namespace gt {

std::string ParallelDims::str() const {
  std::ostringstream os;
  os << "dp=" << dp << " x fsdp=" << fsdp << " x tp=" << tp << " (" << world_size()
     << (world_size() == 1 ? " rank)" : " ranks)");
  return os.str();
}

ParallelDims ParallelDims::validated(int dp, int fsdp, int tp, int world_size, int n_head,
                                     int n_embd, int vocab_size) {
  if (dp < 1 || fsdp < 1 || tp < 1)
    fail("parallel: every degree must be >= 1, got dp=", dp, " fsdp=", fsdp, " tp=", tp);
  if (dp * fsdp * tp != world_size)
    fail("parallel: dp x fsdp x tp must equal the world size: ", dp, " x ", fsdp, " x ", tp,
         " = ", dp * fsdp * tp, ", but ", world_size, world_size == 1 ? " rank is" : " ranks are",
         " running", world_size == 1 ? " (launch with mpirun -np " + std::to_string(dp * fsdp * tp) + ")" : "");
  if (n_head % tp != 0)
    fail("parallel.tp=", tp, " must divide model.n_head=", n_head);
  if (n_embd % tp != 0)
    fail("parallel.tp=", tp, " must divide model.n_embd=", n_embd);
  if (vocab_size % tp != 0)
    fail("parallel.tp=", tp, " must divide model.vocab_size=", vocab_size,
         " (the embedding and LM head are split by vocabulary rows)");
  return ParallelDims{dp, fsdp, tp};
}

}  // namespace gt
