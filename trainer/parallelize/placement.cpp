#include "trainer/parallelize/placement.hpp"

namespace gt {

TpSplit Placement::split() const {
  switch (role) {
    case TpRole::column:
    case TpRole::vocab:
      return TpSplit::rows;
    case TpRole::row:
      return TpSplit::cols;
    case TpRole::sequence_replicated:
    case TpRole::gathered_replicated:
      return TpSplit::replicated;
  }
  return TpSplit::replicated;
}

bool Placement::tp_partial_grad() const { return role == TpRole::sequence_replicated; }

bool owns_replica(TpSplit split, int dp_rank, int tp_rank) {
  return dp_rank == 0 && (tp_rank == 0 || split != TpSplit::replicated);
}

}  // namespace gt
