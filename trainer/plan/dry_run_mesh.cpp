#include "trainer/plan/dry_run_mesh.hpp"

#include <string>
#include <utility>

namespace gt {
namespace {

class DryRunCommunicator final : public Communicator {
 public:
  DryRunCommunicator(std::string name, int rank, int size)
      : name_(std::move(name)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

 protected:
  // Complete on return (a default CommHandle), buffers untouched.
  CommHandle do_all_reduce(float*, int64_t, ReduceOp) override { return {}; }
  CommHandle do_reduce_scatter_sum(const float*, float*, int64_t) override { return {}; }
  CommHandle do_all_reduce_sum_bf16(uint16_t*, int64_t) override { return {}; }
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t*, uint16_t*, int64_t) override {
    return {};
  }
  CommHandle do_all_gather(const float*, float*, int64_t) override { return {}; }
  CommHandle do_broadcast(float*, int64_t, int) override { return {}; }
  CommHandle do_send(const float*, int64_t, int, int) override { return {}; }
  CommHandle do_recv(float*, int64_t, int, int) override { return {}; }
  double do_all_reduce_f64(double value, ReduceOp) override { return value; }
  int64_t do_all_reduce_i64(int64_t value, ReduceOp) override { return value; }
  void do_barrier() override {}

 private:
  std::string name_;
  int rank_, size_;
};

}  // namespace

DeviceMesh make_dry_run_mesh(const ParallelDims& dims, int rank) {
  const MeshCoord coord = mesh_coord_of(dims, rank);
  MeshComms comms;
  comms.world = std::make_unique<DryRunCommunicator>("world", rank, dims.world_size());
  for (MeshAxis a : mesh_split_axes(dims))
    comms.axes[static_cast<size_t>(a)] = std::make_unique<DryRunCommunicator>(
        mesh_axis_name(a), mesh_axis_index(dims, coord, a), mesh_axis_size(dims, a));
  return DeviceMesh(dims, rank, std::move(comms));
}

}  // namespace gt
