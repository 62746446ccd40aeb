#include "parallel/parallel_dims.hpp"

#include <sstream>

#include "kernels/core/error.hpp"

namespace gt {

std::string ParallelDims::str() const {
  std::ostringstream os;
  if (pp > 1) os << "pp=" << pp << " x ";
  os << "dp=" << dp << " x fsdp=" << fsdp << " x tp=" << tp << " (" << world_size()
     << (world_size() == 1 ? " rank)" : " ranks)");
  return os.str();
}

ParallelDims ParallelDims::validated(int dp, int fsdp, int tp, int world_size, int pp) {
  if (pp < 1) fail("parallel degrees (pp=", pp, "): expected every degree >= 1, got pp=", pp);
  if (dp < 1 || fsdp < 1 || tp < 1)
    fail("parallel degrees (dp=", dp, ", fsdp=", fsdp, ", tp=", tp,
         "): expected every degree >= 1, got ", dp < 1 ? "dp" : fsdp < 1 ? "fsdp" : "tp", "=",
         dp < 1 ? dp : fsdp < 1 ? fsdp : tp);
  const ParallelDims d{dp, fsdp, tp, pp};
  if (d.world_size() != world_size) {
    // The pipeline's degree is named only when there is one (the familiar
    // three-axis message otherwise).
    const std::string axes = pp > 1 ? "parallel.pp x parallel.dp x parallel.fsdp x parallel.tp"
                                    : "parallel.dp x parallel.fsdp x parallel.tp";
    const std::string got = pp > 1 ? detail::concat(pp, " x ", dp, " x ", fsdp, " x ", tp)
                                   : detail::concat(dp, " x ", fsdp, " x ", tp);
    fail("parallel layout (", world_size, world_size == 1 ? " rank" : " ranks", "): expected ",
         axes, " = the number of ranks, got ", got, " = ", d.world_size(), " for ", world_size,
         world_size == 1 ? " rank" : " ranks",
         world_size == 1 ? "; no MPI launcher was detected: start it with mpirun -np " +
                               std::to_string(d.world_size())
                         : "; change the degrees or the number of ranks");
  }
  return d;
}

}  // namespace gt
