// DeviceMesh: the ranks of a job laid out as pp x dp x fsdp x cp x tp, tp
// innermost so that tensor-parallel peers are neighbouring ranks (the same
// host, NVLink), cp next to it (context-parallel peers exchange every
// layer's keys and values: Llama 3 puts CP right outside TP), pp outermost
// so that a pipeline's stages are the farthest apart (across hosts, where
// only point-to-point activations travel):
//
//   rank = ((((pp_i * dp + dp_i) * fsdp + fsdp_i) * cp + cp_i) * tp + tp_i
//
// The mesh owns one Communicator per axis: "pp", "dp", "fsdp", "cp", "tp"
// (the ranks that differ only in that coordinate, ordered by it; "pp" ranks
// are a pipeline's stages, in order), "data" = dp x fsdp (the ranks of the
// same stage with the same cp_i and tp_i, ordered by dp_i * fsdp + fsdp_i:
// the rank in "data" is the index of this rank's data shard), and the two
// groups that fold cp into a data axis, "dp_cp" = dp x cp (ordered by dp_i *
// cp + cp_i) and "fsdp_cp" = fsdp x cp (fsdp_i * cp + cp_i): the parameters
// are replicated over cp, so their gradients are summed over it too. At cp =
// 1 those two are the dp and fsdp communicators themselves (the same ranks;
// no communicator of their own). It also keeps a private "world" copy. With
// MPI each is an MPI_Comm_split of the world; for world size 1 every axis is
// an InProcessCommunicator. Other backends (NCCL, MPI staged for device
// buffers) build their communicators with the same split colors and keys and
// hand them over as MeshComms: see mesh_factory.hpp.
//
// The mesh says who talks to whom; what is sharded over which axis belongs to
// the placements, not here.
#pragma once

#include <array>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "parallel/communicator.hpp"
#include "parallel/parallel_dims.hpp"

namespace gt {

class MpiCommunicator;

// ep: expert parallelism's groups of ParallelDims::ep consecutive "data"
// ranks (index data_i % ep), which split a mixture's experts between them and
// exchange tokens all-to-all. edp: the expert-data-parallel group, the ranks
// holding the same experts (same ep index, pp and tp; every data group of ep
// ranks and every cp rank, ordered by (data_i / ep) * cp + cp_i), over which
// expert gradients are reduced and expert state sharded. Both split only at
// ep > 1.
enum class MeshAxis { dp, fsdp, tp, data, pp, cp, dp_cp, fsdp_cp, ep, edp };
// "dp", "fsdp", "tp", "data", "pp", "cp", "dp_cp", "fsdp_cp", "ep", "edp"
const char* mesh_axis_name(MeshAxis axis);
// Every axis, in the order every rank splits them.
inline constexpr MeshAxis kMeshAxes[] = {MeshAxis::dp,    MeshAxis::fsdp,    MeshAxis::tp,
                                         MeshAxis::data,  MeshAxis::pp,      MeshAxis::cp,
                                         MeshAxis::dp_cp, MeshAxis::fsdp_cp, MeshAxis::ep,
                                         MeshAxis::edp};
// The axes that have a communicator of their own in a mesh of `dims`, in
// kMeshAxes order: all but dp_cp and fsdp_cp at cp = 1, which are then the
// same ranks as dp and fsdp (mesh_axis_alias), and ep and edp at ep = 1
// (nothing to exchange: DeviceMesh::axis refuses them). Loops that split, observe or
// count communicators go over these, so no communicator is seen twice.
std::vector<MeshAxis> mesh_split_axes(const ParallelDims& dims);
// The axis whose communicator `axis` uses in a mesh of `dims`: itself, or
// dp (fsdp) for dp_cp (fsdp_cp) at cp = 1.
MeshAxis mesh_axis_alias(const ParallelDims& dims, MeshAxis axis);

struct MeshCoord {
  int dp = 0;
  int fsdp = 0;
  int tp = 0;
  int pp = 0;
  int cp = 0;
  bool operator==(const MeshCoord& o) const {
    return dp == o.dp && fsdp == o.fsdp && tp == o.tp && pp == o.pp && cp == o.cp;
  }
};

// Pure layout arithmetic, usable without any communicator.
MeshCoord mesh_coord_of(const ParallelDims& dims, int rank);
int mesh_rank_of(const ParallelDims& dims, const MeshCoord& c);
// Index of `c` along `axis`: dp_i, fsdp_i, tp_i, pp_i, cp_i, or for the
// groups dp_i * fsdp + fsdp_i (data), dp_i * cp + cp_i (dp_cp), fsdp_i * cp +
// cp_i (fsdp_cp).
int mesh_axis_index(const ParallelDims& dims, const MeshCoord& c, MeshAxis axis);
int mesh_axis_size(const ParallelDims& dims, MeshAxis axis);
// World ranks in `rank`'s group along `axis`, ordered by their index on it.
std::vector<int> mesh_axis_ranks(const ParallelDims& dims, int rank, MeshAxis axis);
// The split color of `c` along `axis`: the coordinates the axis does NOT vary,
// flattened. Every backend splits the world with this color and the key
// mesh_axis_index(), so all of them group and order ranks identically.
int mesh_axis_color(const ParallelDims& dims, const MeshCoord& c, MeshAxis axis);

// One rank's communicators for a mesh, from any backend, before a DeviceMesh
// takes them over: one per mesh_split_axes(dims), the others null.
struct MeshComms {
  std::unique_ptr<Communicator> world;
  std::array<std::unique_ptr<Communicator>, std::size(kMeshAxes)> axes;  // indexed by MeshAxis
};
// Collective over `world`: its private copy and the split axes, each an
// MPI_Comm_split with mesh_axis_color / mesh_axis_index. Fails (on every
// rank alike) when world's size is not dims.world_size().
MeshComms split_mpi_mesh(const ParallelDims& dims, const MpiCommunicator& world);

class DeviceMesh {
 public:
  // Collective over `world`: every rank calls it with the same dims. world's
  // size must equal dims.world_size(); its rank is this rank's mesh rank.
  // The axis communicators inherit world's deadline and logger.
  DeviceMesh(const ParallelDims& dims, const MpiCommunicator& world);
  // Takes over ready-made communicators of mesh rank `rank` (any backend).
  // Checks that world and every axis are there with the size and rank the
  // layout gives, so a backend that split wrongly fails here, by axis.
  DeviceMesh(const ParallelDims& dims, int rank, MeshComms comms);
  // World size 1: every axis (and world) is an in-process communicator.
  static DeviceMesh in_process();

  DeviceMesh(DeviceMesh&&) noexcept = default;
  DeviceMesh& operator=(DeviceMesh&&) noexcept = default;
  ~DeviceMesh();

  const ParallelDims& dims() const { return dims_; }
  int rank() const { return rank_; }
  const MeshCoord& coord() const { return coord_; }

  // The communicator of `a` (dp's for dp_cp at cp = 1, fsdp's for fsdp_cp).
  Communicator& axis(MeshAxis a) const;
  Communicator& dp() const { return axis(MeshAxis::dp); }
  Communicator& fsdp() const { return axis(MeshAxis::fsdp); }
  Communicator& tp() const { return axis(MeshAxis::tp); }
  Communicator& cp() const { return axis(MeshAxis::cp); }
  Communicator& data() const { return axis(MeshAxis::data); }
  Communicator& pp() const { return axis(MeshAxis::pp); }
  // Expert parallelism's group; only at dims().ep > 1.
  Communicator& ep() const { return axis(MeshAxis::ep); }
  // The expert-data-parallel group; only at dims().ep > 1.
  Communicator& edp() const { return axis(MeshAxis::edp); }
  Communicator& world() const { return *world_; }
  // Communicator::drain on world and every axis: before the host reads what
  // device-waited collectives (NCCL) produced.
  void drain() const;

  // Multi-line table, one row per rank: rank -> (pp, dp, fsdp, cp, tp) and
  // its data shard. For rank 0 to print at start-up.
  std::string describe() const;

 private:
  DeviceMesh(const ParallelDims& dims, int rank);
  ParallelDims dims_;
  int rank_ = 0;
  MeshCoord coord_;
  std::unique_ptr<Communicator> world_;
  std::array<std::unique_ptr<Communicator>, std::size(kMeshAxes)> axes_;  // indexed by MeshAxis
};

}  // namespace gt
