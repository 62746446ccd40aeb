// InProcessCommunicator and the in-process mesh: the size-1 semantics
// (collectives are copies, ring volumes are 0, point-to-point is an error).
// Needs no MPI, but lives with the other communicator tests.
#include "mpi_test_util.hpp"
#include "parallel/in_process_communicator.hpp"
#include "parallel/mesh.hpp"

namespace gt::test {
namespace {

TEST(InProcessCommunicator, CollectivesAreCopies) {
  InProcessCommunicator c("solo");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.name(), "solo");
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    auto x = filled(0, n);
    CommHandle h = c.all_reduce_sum(x.data(), n);
    EXPECT_TRUE(h.done());
    EXPECT_TRUE(exactly(x, filled(0, n)));

    std::vector<float> out(static_cast<size_t>(n), -1.f);
    c.reduce_scatter_sum(x.data(), out.data(), n).wait();
    EXPECT_TRUE(exactly(out, x));
    std::fill(out.begin(), out.end(), -1.f);
    c.all_gather(x.data(), out.data(), n).wait();
    EXPECT_TRUE(exactly(out, x));
    c.broadcast(x.data(), n, 0).wait();
    EXPECT_TRUE(exactly(x, filled(0, n)));
  }
  EXPECT_EQ(c.all_reduce_f64(2.5, ReduceOp::sum), 2.5);
  EXPECT_EQ(c.all_reduce_i64(-7, ReduceOp::max), -7);
  c.barrier();
  EXPECT_EQ(c.bytes_sent(), 0.0);  // every ring volume has the factor (p - 1) = 0
}

TEST(InProcessCommunicator, AllToAllVIsACopyToItself) {
  InProcessCommunicator c("solo");
  const std::vector<uint16_t> in{1, 2, 3};
  std::vector<uint16_t> out(3, 0);
  const int64_t three = 3, two = 2, none = 0;
  c.all_to_all_v(in.data(), &three, out.data(), &three, 2).wait();
  EXPECT_EQ(out, in);
  c.all_to_all_v(nullptr, &none, nullptr, &none, 4).wait();  // nothing to move
  EXPECT_NE(error_message([&] { c.all_to_all_v(in.data(), &three, out.data(), &two, 2); })
                .find("sends 3 elements to itself but expects to receive 2"),
            std::string::npos);
  EXPECT_EQ(c.bytes_sent(), 0.0);
}

TEST(InProcessCommunicator, Bf16SumsAreTheValuesThemselves) {
  InProcessCommunicator c("solo");
  check_bf16_sums_on_host(c);
}

TEST(InProcessCommunicator, PointToPointIsAClearError) {
  InProcessCommunicator c("solo");
  std::vector<float> x(4);
  const std::string s = error_message([&] { c.send(x.data(), 4, 0); });
  EXPECT_NE(s.find("send of 4 floats to peer 0"), std::string::npos) << s;
  EXPECT_NE(s.find("in-process communicator of size 1"), std::string::npos) << s;
  const std::string r = error_message([&] { c.recv(x.data(), 4, 0); });
  EXPECT_NE(r.find("recv of 4 floats from peer 0"), std::string::npos) << r;
  EXPECT_NE(error_message([&] { c.broadcast(x.data(), 4, 1); }).find("outside [0, 1)"),
            std::string::npos);
}

TEST(InProcessMesh, EveryAxisIsOneRank) {
  DeviceMesh m = DeviceMesh::in_process();
  EXPECT_EQ(m.dims().world_size(), 1);
  EXPECT_EQ(m.rank(), 0);
  EXPECT_EQ(m.coord(), (MeshCoord{0, 0, 0}));
  for (MeshAxis a : {MeshAxis::dp, MeshAxis::fsdp, MeshAxis::tp, MeshAxis::data}) {
    EXPECT_EQ(m.axis(a).size(), 1);
    EXPECT_EQ(m.axis(a).name(), mesh_axis_name(a));
  }
  EXPECT_EQ(m.world().size(), 1);
  auto x = filled(0, 7);
  m.tp().all_reduce_sum(x.data(), 7).wait();
  EXPECT_TRUE(exactly(x, filled(0, 7)));
  DeviceMesh moved = std::move(m);
  EXPECT_EQ(moved.data().name(), "data");
}

}  // namespace
}  // namespace gt::test
