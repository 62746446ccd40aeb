#include "trainer/parallelize/placement.hpp"

namespace gt {

const char* tp_split_name(TpSplit s) {
  switch (s) {
    case TpSplit::replicated:
      return "replicated";
    case TpSplit::rows:
      return "rows";
    case TpSplit::cols:
      return "cols";
  }
  return "?";
}

const char* tp_role_name(TpRole r) {
  switch (r) {
    case TpRole::sequence_replicated:
      return "sequence-replicated";
    case TpRole::gathered_replicated:
      return "gathered-replicated";
    case TpRole::column:
      return "column";
    case TpRole::row:
      return "row";
    case TpRole::vocab:
      return "vocab";
  }
  return "?";
}

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
