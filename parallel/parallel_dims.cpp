#include "parallel/parallel_dims.hpp"

#include <sstream>

#include "kernels/core/error.hpp"

namespace gt {

std::string ParallelDims::str() const {
  std::ostringstream os;
  if (pp > 1) os << "pp=" << pp << " x ";
  os << "dp=" << dp << " x fsdp=" << fsdp << " x ";
  if (cp > 1) os << "cp=" << cp << " x ";
  os << "tp=" << tp << " (" << world_size()
     << (world_size() == 1 ? " rank)" : " ranks)");
  if (ep > 1) os << ", ep=" << ep << " over the data ranks";
  return os.str();
}

ParallelDims ParallelDims::validated(int dp, int fsdp, int tp, int world_size, int pp, int cp) {
  if (pp < 1) fail("parallel degrees (pp=", pp, "): expected every degree >= 1, got pp=", pp);
  if (cp < 1) fail("parallel degrees (cp=", cp, "): expected every degree >= 1, got cp=", cp);
  if (dp < 1 || fsdp < 1 || tp < 1)
    fail("parallel degrees (dp=", dp, ", fsdp=", fsdp, ", tp=", tp,
         "): expected every degree >= 1, got ", dp < 1 ? "dp" : fsdp < 1 ? "fsdp" : "tp", "=",
         dp < 1 ? dp : fsdp < 1 ? fsdp : tp);
  const ParallelDims d{dp, fsdp, tp, pp, cp};
  if (d.world_size() != world_size) {
    // The pipeline's and the context's degrees are named only when there is
    // one (the familiar three-axis message otherwise).
    std::string axes = "parallel.dp x parallel.fsdp x ";
    std::string got = detail::concat(dp, " x ", fsdp, " x ");
    if (pp > 1) {
      axes = "parallel.pp x " + axes;
      got = detail::concat(pp, " x ") + got;
    }
    if (cp > 1) {
      axes += "parallel.cp x ";
      got += detail::concat(cp, " x ");
    }
    axes += "parallel.tp";
    got += std::to_string(tp);
    fail("parallel layout (", world_size, world_size == 1 ? " rank" : " ranks", "): expected ",
         axes, " = the number of ranks, got ", got, " = ", d.world_size(), " for ", world_size,
         world_size == 1 ? " rank" : " ranks",
         world_size == 1 ? "; no MPI launcher was detected: start it with mpirun -np " +
                               std::to_string(d.world_size())
                         : "; change the degrees or the number of ranks");
  }
  return d;
}

ParallelDims ParallelDims::with_expert_parallel(int ep_degree) const {
  if (ep_degree < 1 || data_parallel() % ep_degree != 0)
    fail("parallel.ep: expected a divisor of the data ranks parallel.dp x parallel.fsdp = ",
         data_parallel(), ", got ", ep_degree);
  ParallelDims d = *this;
  d.ep = ep_degree;
  return d;
}

}  // namespace gt
