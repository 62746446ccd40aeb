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

ParallelDims ParallelDims::validated(int dp, int fsdp, int tp, int world_size) {
  if (dp < 1 || fsdp < 1 || tp < 1)
    fail("parallel degrees (dp=", dp, ", fsdp=", fsdp, ", tp=", tp,
         "): expected every degree >= 1, got ", dp < 1 ? "dp" : fsdp < 1 ? "fsdp" : "tp", "=",
         dp < 1 ? dp : fsdp < 1 ? fsdp : tp);
  if (dp * fsdp * tp != world_size)
    fail("parallel layout (", world_size, world_size == 1 ? " rank" : " ranks",
         "): expected parallel.dp x parallel.fsdp x parallel.tp = the number of ranks, got ", dp,
         " x ", fsdp, " x ", tp, " = ", dp * fsdp * tp, " for ", world_size,
         world_size == 1 ? " rank" : " ranks",
         world_size == 1 ? "; no MPI launcher was detected: start it with mpirun -np " +
                               std::to_string(dp * fsdp * tp)
                         : "; change the degrees or the number of ranks");
  return ParallelDims{dp, fsdp, tp};
}

}  // namespace gt
