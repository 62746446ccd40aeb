#include "parallel/mesh.hpp"

#include <iomanip>
#include <sstream>

#include "kernels/core/error.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mpi_communicator.hpp"

namespace gt {

const char* mesh_axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp: return "dp";
    case MeshAxis::fsdp: return "fsdp";
    case MeshAxis::tp: return "tp";
    case MeshAxis::data: return "data";
    case MeshAxis::pp: return "pp";
    case MeshAxis::cp: return "cp";
    case MeshAxis::dp_cp: return "dp_cp";
    case MeshAxis::fsdp_cp:
      return "fsdp_cp";
    case MeshAxis::ep:
      return "ep";
    case MeshAxis::edp:
      return "edp";
  }
  return "?";
}

MeshAxis mesh_axis_alias(const ParallelDims& d, MeshAxis axis) {
  if (d.cp == 1 && axis == MeshAxis::dp_cp) return MeshAxis::dp;
  if (d.cp == 1 && axis == MeshAxis::fsdp_cp) return MeshAxis::fsdp;
  return axis;
}

std::vector<MeshAxis> mesh_split_axes(const ParallelDims& d) {
  std::vector<MeshAxis> out;
  for (MeshAxis a : kMeshAxes)
    if (mesh_axis_alias(d, a) == a && ((a != MeshAxis::ep && a != MeshAxis::edp) || d.ep > 1)) out.push_back(a);
  return out;
}

MeshCoord mesh_coord_of(const ParallelDims& d, int rank) {
  if (rank < 0 || rank >= d.world_size())
    fail("mesh: rank ", rank, " is outside the mesh ", d.str());
  MeshCoord c;
  c.tp = rank % d.tp;
  c.cp = (rank / d.tp) % d.cp;
  c.fsdp = (rank / (d.tp * d.cp)) % d.fsdp;
  c.dp = (rank / (d.tp * d.cp * d.fsdp)) % d.dp;
  c.pp = rank / (d.tp * d.cp * d.fsdp * d.dp);
  return c;
}

int mesh_rank_of(const ParallelDims& d, const MeshCoord& c) {
  if (c.dp < 0 || c.dp >= d.dp || c.fsdp < 0 || c.fsdp >= d.fsdp || c.tp < 0 || c.tp >= d.tp ||
      c.pp < 0 || c.pp >= d.pp || c.cp < 0 || c.cp >= d.cp)
    fail("mesh: coordinate (pp=", c.pp, ", dp=", c.dp, ", fsdp=", c.fsdp, ", cp=", c.cp,
         ", tp=", c.tp, ") is outside ", d.str());
  return (((c.pp * d.dp + c.dp) * d.fsdp + c.fsdp) * d.cp + c.cp) * d.tp + c.tp;
}

int mesh_axis_index(const ParallelDims& d, const MeshCoord& c, MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp: return c.dp;
    case MeshAxis::fsdp: return c.fsdp;
    case MeshAxis::tp: return c.tp;
    case MeshAxis::data: return c.dp * d.fsdp + c.fsdp;
    case MeshAxis::pp: return c.pp;
    case MeshAxis::cp: return c.cp;
    case MeshAxis::dp_cp: return c.dp * d.cp + c.cp;
    case MeshAxis::fsdp_cp:
      return c.fsdp * d.cp + c.cp;
    case MeshAxis::ep:
      return (c.dp * d.fsdp + c.fsdp) % d.ep;
    case MeshAxis::edp:
      return (c.dp * d.fsdp + c.fsdp) / d.ep * d.cp + c.cp;
  }
  fail("mesh: unknown axis ", static_cast<int>(axis));
}

int mesh_axis_size(const ParallelDims& d, MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp: return d.dp;
    case MeshAxis::fsdp: return d.fsdp;
    case MeshAxis::tp: return d.tp;
    case MeshAxis::data: return d.dp * d.fsdp;
    case MeshAxis::pp: return d.pp;
    case MeshAxis::cp: return d.cp;
    case MeshAxis::dp_cp: return d.dp * d.cp;
    case MeshAxis::fsdp_cp:
      return d.fsdp * d.cp;
    case MeshAxis::ep:
      return d.ep;
    case MeshAxis::edp:
      return d.dp * d.fsdp / d.ep * d.cp;
  }
  fail("mesh: unknown axis ", static_cast<int>(axis));
}

int mesh_axis_color(const ParallelDims& d, const MeshCoord& c, MeshAxis axis) {
  switch (axis) {
    // The coordinates the axis does not vary, flattened (pp outermost).
    case MeshAxis::dp:
      return ((c.pp * d.fsdp + c.fsdp) * d.cp + c.cp) * d.tp + c.tp;
    case MeshAxis::fsdp:
      return ((c.pp * d.dp + c.dp) * d.cp + c.cp) * d.tp + c.tp;
    case MeshAxis::tp:
      return ((c.pp * d.dp + c.dp) * d.fsdp + c.fsdp) * d.cp + c.cp;
    case MeshAxis::data:
      return (c.pp * d.cp + c.cp) * d.tp + c.tp;
    case MeshAxis::pp:
      return ((c.dp * d.fsdp + c.fsdp) * d.cp + c.cp) * d.tp + c.tp;
    case MeshAxis::cp:
      return ((c.pp * d.dp + c.dp) * d.fsdp + c.fsdp) * d.tp + c.tp;
    case MeshAxis::dp_cp:
      return (c.pp * d.fsdp + c.fsdp) * d.tp + c.tp;
    case MeshAxis::fsdp_cp:
      return (c.pp * d.dp + c.dp) * d.tp + c.tp;
    case MeshAxis::ep:  // which group of ep data ranks, then pp, cp, tp
      return (((c.dp * d.fsdp + c.fsdp) / d.ep * d.pp + c.pp) * d.cp + c.cp) * d.tp + c.tp;
    case MeshAxis::edp:  // which expert shard, then pp, tp
      return ((c.dp * d.fsdp + c.fsdp) % d.ep * d.pp + c.pp) * d.tp + c.tp;
  }
  fail("mesh: unknown axis ", static_cast<int>(axis));
}

std::vector<int> mesh_axis_ranks(const ParallelDims& d, int rank, MeshAxis axis) {
  const MeshCoord me = mesh_coord_of(d, rank);
  std::vector<int> ranks(static_cast<size_t>(mesh_axis_size(d, axis)), -1);
  for (int r = 0; r < d.world_size(); ++r) {
    const MeshCoord c = mesh_coord_of(d, r);
    if (mesh_axis_color(d, c, axis) == mesh_axis_color(d, me, axis))
      ranks[static_cast<size_t>(mesh_axis_index(d, c, axis))] = r;
  }
  return ranks;
}

DeviceMesh::DeviceMesh(const ParallelDims& dims, int rank)
    : dims_(dims), rank_(rank), coord_(mesh_coord_of(dims, rank)) {}

MeshComms split_mpi_mesh(const ParallelDims& dims, const MpiCommunicator& world) {
  if (world.size() != dims.world_size())
    fail("mesh: the layout ", dims.str(), " needs ", dims.world_size(),
         " ranks but communicator '", world.name(), "' has ", world.size());
  const MeshCoord coord = mesh_coord_of(dims, world.rank());
  // Same order on every rank: each split is collective over world.
  MeshComms comms;
  auto world_copy = world.split(0, world.rank(), "world");
  for (MeshAxis a : mesh_split_axes(dims))
    comms.axes[static_cast<size_t>(a)] = world_copy->split(
        mesh_axis_color(dims, coord, a), mesh_axis_index(dims, coord, a), mesh_axis_name(a));
  comms.world = std::move(world_copy);
  return comms;
}

DeviceMesh::DeviceMesh(const ParallelDims& dims, const MpiCommunicator& world)
    : DeviceMesh(dims, world.rank(), split_mpi_mesh(dims, world)) {}

DeviceMesh::DeviceMesh(const ParallelDims& dims, int rank, MeshComms comms)
    : DeviceMesh(dims, rank) {
  world_ = std::move(comms.world);
  axes_ = std::move(comms.axes);
  if (!world_ || world_->size() != dims_.world_size() || world_->rank() != rank_)
    fail("mesh ", dims_.str(), ": expected a world communicator of ", dims_.world_size(),
         " ranks in which this is rank ", rank_, ", got ",
         world_ ? detail::concat("rank ", world_->rank(), " of ", world_->size()) : "none");
  for (MeshAxis a : mesh_split_axes(dims_)) {
    const Communicator& c = axis(a);  // fails naming a missing axis
    if (c.size() != mesh_axis_size(dims_, a) || c.rank() != mesh_axis_index(dims_, coord_, a))
      fail("mesh ", dims_.str(), " rank ", rank_, ": expected axis ", mesh_axis_name(a),
           " as rank ", mesh_axis_index(dims_, coord_, a), " of ", mesh_axis_size(dims_, a),
           ", got communicator '", c.name(), "' as rank ", c.rank(), " of ", c.size());
  }
}

DeviceMesh DeviceMesh::in_process() {
  DeviceMesh m(ParallelDims{1, 1, 1, 1, 1}, 0);
  m.world_ = std::make_unique<InProcessCommunicator>("world");
  for (MeshAxis a : mesh_split_axes(m.dims_))
    m.axes_[static_cast<size_t>(a)] = std::make_unique<InProcessCommunicator>(mesh_axis_name(a));
  return m;
}

// Axis communicators go before world (they were split from it; either order
// is legal in MPI, this one mirrors construction).
DeviceMesh::~DeviceMesh() {
  for (auto& c : axes_) c.reset();
  world_.reset();
}

void DeviceMesh::drain() const {
  if (world_) world_->drain();
  for (const auto& a : axes_)
    if (a) a->drain();
}

Communicator& DeviceMesh::axis(MeshAxis a) const {
  const auto i = static_cast<size_t>(mesh_axis_alias(dims_, a));
  if ((a == MeshAxis::ep || a == MeshAxis::edp) && dims_.ep == 1)
    fail("mesh: no ", mesh_axis_name(a),
         " communicator at parallel.ep=1 (every rank holds every expert)");
  if (i >= axes_.size() || !axes_[i])
    fail("mesh: no communicator for axis ", i < axes_.size() ? mesh_axis_name(a) : "?");
  return *axes_[i];
}

std::string DeviceMesh::describe() const {
  std::ostringstream os;
  // The pipeline column only when there is a pipeline (the familiar table otherwise).
  // The pipeline and context columns only when there are pipeline stages
  // or context ranks (the familiar table otherwise).
  const bool pp = dims_.pp > 1, cp = dims_.cp > 1;
  os << "device mesh " << dims_.str() << ", rank = " << (cp ? "(" : "")
     << (pp ? detail::concat("(((pp_i * ", dims_.dp, " + dp_i) * ") : std::string("((dp_i * "))
     << dims_.fsdp << ") + fsdp_i) * "
     << (cp ? detail::concat(dims_.cp, " + cp_i) * ") : std::string()) << dims_.tp
     << " + tp_i\n";
  os << "  rank |" << (pp ? "   pp" : "") << "   dp fsdp" << (cp ? "   cp" : "")
     << "   tp | data\n";
  for (int r = 0; r < dims_.world_size(); ++r) {
    const MeshCoord c = mesh_coord_of(dims_, r);
    os << "  " << std::setw(4) << r << " |";
    if (pp) os << ' ' << std::setw(4) << c.pp;
    os << ' ' << std::setw(4) << c.dp << ' ' << std::setw(4) << c.fsdp;
    if (cp) os << ' ' << std::setw(4) << c.cp;
    os << ' ' << std::setw(4) << c.tp << " | " << std::setw(4)
       << mesh_axis_index(dims_, c, MeshAxis::data) << '\n';
  }
  return os.str();
}

}  // namespace gt
