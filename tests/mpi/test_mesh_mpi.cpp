// DeviceMesh over MPI: for every layout that fits the running world size
// (at 4 ranks: 4x1x1, 1x4x1, 1x1x4, 2x2x1, 2x1x2, 1x2x2), the coordinates,
// each axis communicator's membership and order, and every collective on
// every axis in closed form: world rank g fills x[i] = g + i*0.5, so each
// expected value follows from the group's world ranks (mesh_axis_ranks).
#include <numeric>

#include "mpi_test_util.hpp"
#include "parallel/mesh.hpp"
#include "parallel/mesh_factory.hpp"
#include "parallel/staged_communicator.hpp"

namespace gt::test {
namespace {

// layouts_for's, each with every pipeline and context degree that fits:
// pp x dp x fsdp x cp x tp.
std::vector<ParallelDims> mesh_layouts_for(int world) {
  std::vector<ParallelDims> out;
  for (int pp = 1; pp <= world; ++pp)
    for (int cp = 1; pp * cp <= world; ++cp)
      if (world % (pp * cp) == 0)
        for (ParallelDims d : layouts_for(world / (pp * cp))) {
          d.pp = pp;
          d.cp = cp;
          out.push_back(d);
          // Expert parallelism over every divisor of the data ranks.
          for (int ep = 2; ep <= d.data_parallel(); ++ep)
            if (d.data_parallel() % ep == 0) out.push_back(d.with_expert_parallel(ep));
        }
  return out;
}

// pp outermost: a pipeline's stages are the farthest-apart ranks, tp the
// nearest; the pp axis joins the ranks of equal (dp, fsdp, tp).
TEST(MeshLayout, RankFormulaPpOutermost) {
  const ParallelDims d{2, 1, 2, 3};  // 12 ranks
  for (int r = 0; r < d.world_size(); ++r) {
    const MeshCoord c = mesh_coord_of(d, r);
    EXPECT_EQ(((c.pp * 2 + c.dp) * 1 + c.fsdp) * 2 + c.tp, r);
    EXPECT_EQ(mesh_rank_of(d, c), r);
  }
  EXPECT_EQ(mesh_coord_of(d, 7), (MeshCoord{1, 0, 1, 1}));
  EXPECT_EQ(mesh_axis_ranks(d, 7, MeshAxis::pp), (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(mesh_axis_ranks(d, 7, MeshAxis::tp), (std::vector<int>{6, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 7, MeshAxis::dp), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 7, MeshAxis::data), (std::vector<int>{5, 7}));
  EXPECT_EQ(d.str(), "pp=3 x dp=2 x fsdp=1 x tp=2 (12 ranks)");
  EXPECT_NE(error_message([&] {
              mesh_rank_of(d, MeshCoord{0, 0, 0, 3});
            }).find("pp=3"),
            std::string::npos);
  const std::string e = error_message([&] { ParallelDims::validated(2, 1, 2, 8, 3); });
  EXPECT_NE(e.find("parallel.pp x parallel.dp x parallel.fsdp x parallel.tp = the number of "
                   "ranks, got 3 x 2 x 1 x 2 = 12 for 8 ranks"),
            std::string::npos)
      << e;
}

// cp between fsdp and tp; its groups: cp (the ranks of one sequence's
// chunks), dp_cp and fsdp_cp (the data axis the replicated parameters'
// gradients sum over), data (the distinct rows: the same cp_i).
TEST(MeshLayout, RankFormulaCpNextToTp) {
  const ParallelDims d{2, 1, 2, 1, 3};  // dp 2, fsdp 1, tp 2, pp 1, cp 3: 12 ranks
  for (int r = 0; r < d.world_size(); ++r) {
    const MeshCoord c = mesh_coord_of(d, r);
    EXPECT_EQ(((c.dp * 1 + c.fsdp) * 3 + c.cp) * 2 + c.tp, r);
    EXPECT_EQ(mesh_rank_of(d, c), r);
  }
  // rank 9 = dp 1, cp 1, tp 1
  EXPECT_EQ(mesh_coord_of(d, 9), (MeshCoord{1, 0, 1, 0, 1}));
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::cp), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::tp), (std::vector<int>{8, 9}));
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::dp), (std::vector<int>{3, 9}));
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::data), (std::vector<int>{3, 9}));
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::dp_cp), (std::vector<int>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(mesh_axis_index(d, mesh_coord_of(d, 9), MeshAxis::dp_cp), 4);
  EXPECT_EQ(mesh_axis_ranks(d, 9, MeshAxis::fsdp_cp), (std::vector<int>{7, 9, 11}));
  EXPECT_EQ(d.str(), "dp=2 x fsdp=1 x cp=3 x tp=2 (12 ranks)");
  const ParallelDims f{1, 2, 1, 1, 2};  // fsdp 2 x cp 2: fsdp_cp = all four
  EXPECT_EQ(mesh_axis_ranks(f, 2, MeshAxis::fsdp_cp), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mesh_axis_ranks(f, 2, MeshAxis::fsdp), (std::vector<int>{0, 2}));
  const std::string e = error_message([&] { ParallelDims::validated(2, 1, 2, 8, 1, 3); });
  EXPECT_NE(e.find("parallel.dp x parallel.fsdp x parallel.cp x parallel.tp = the number of "
                   "ranks, got 2 x 1 x 3 x 2 = 12 for 8 ranks"),
            std::string::npos)
      << e;
  // At cp = 1 the folded groups are dp and fsdp: no communicator of their own.
  const ParallelDims one{2, 2, 1};
  EXPECT_EQ(mesh_axis_alias(one, MeshAxis::dp_cp), MeshAxis::dp);
  EXPECT_EQ(mesh_axis_alias(one, MeshAxis::fsdp_cp), MeshAxis::fsdp);
  // ep and edp have communicators only at ep > 1.
  EXPECT_EQ(mesh_split_axes(one).size(), std::size(kMeshAxes) - 4);
  EXPECT_EQ(mesh_split_axes(d).size(), std::size(kMeshAxes) - 2);
  EXPECT_EQ(mesh_split_axes(d.with_expert_parallel(2)).size(), std::size(kMeshAxes));
}

// ep: groups of ep consecutive data ranks with the same pp, cp and tp,
// folded out of the data ranks (the world stays pp x dp x fsdp x cp x tp).
TEST(MeshLayout, ExpertParallelGroupsAreConsecutiveDataRanks) {
  const ParallelDims d = ParallelDims{2, 2, 2}.with_expert_parallel(2);  // 8 ranks, data = 4
  EXPECT_EQ(d.world_size(), 8);
  EXPECT_EQ(d.str(), "dp=2 x fsdp=2 x tp=2 (8 ranks), ep=2 over the data ranks");
  // rank 5 = dp 1, fsdp 0, tp 1: data index 2, ep group {data 2, data 3}
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::data), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::ep), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 1, MeshAxis::ep), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh_axis_ranks(d, 6, MeshAxis::ep), (std::vector<int>{4, 6}));
  EXPECT_EQ(mesh_axis_index(d, mesh_coord_of(d, 7), MeshAxis::ep), 1);
  const ParallelDims all = ParallelDims{4, 1, 1}.with_expert_parallel(4);
  EXPECT_EQ(mesh_axis_ranks(all, 2, MeshAxis::ep), (std::vector<int>{0, 1, 2, 3}));
  const ParallelDims cp = ParallelDims{2, 1, 1, 1, 2}.with_expert_parallel(2);  // dp 2 x cp 2
  EXPECT_EQ(mesh_axis_ranks(cp, 1, MeshAxis::ep), (std::vector<int>{1, 3}));
  // edp: the ranks holding the same experts (same ep index, pp, tp), ordered
  // by (data_i / ep) * cp + cp_i. d: data 0 and 2 hold ep shard 0.
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::edp), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh_axis_ranks(d, 6, MeshAxis::edp), (std::vector<int>{2, 6}));
  EXPECT_EQ(mesh_axis_index(d, mesh_coord_of(d, 6), MeshAxis::edp), 1);
  EXPECT_EQ(mesh_axis_size(all, MeshAxis::edp), 1);
  // dp 2 x cp 2 at ep 2: each expert shard on one data rank, both its cp ranks.
  EXPECT_EQ(mesh_axis_ranks(cp, 1, MeshAxis::edp), (std::vector<int>{0, 1}));
  EXPECT_EQ(mesh_axis_ranks(cp, 3, MeshAxis::edp), (std::vector<int>{2, 3}));
  const std::string e =
      error_message([] { ParallelDims{2, 3, 1}.with_expert_parallel(4); });
  EXPECT_NE(e.find("parallel.ep: expected a divisor of the data ranks parallel.dp x "
                   "parallel.fsdp = 6, got 4"),
            std::string::npos)
      << e;
}

TEST(MeshLayout, RankFormulaTpInnermost) {
  const ParallelDims d{2, 3, 4};
  for (int r = 0; r < d.world_size(); ++r) {
    const MeshCoord c = mesh_coord_of(d, r);
    EXPECT_EQ((c.dp * 3 + c.fsdp) * 4 + c.tp, r);
    EXPECT_EQ(mesh_rank_of(d, c), r);
  }
  EXPECT_EQ(mesh_coord_of(d, 5), (MeshCoord{0, 1, 1}));
  EXPECT_EQ(mesh_coord_of(d, 23), (MeshCoord{1, 2, 3}));
  EXPECT_NE(error_message([&] { mesh_coord_of(d, 24); }).find("outside the mesh"),
            std::string::npos);
  EXPECT_NE(error_message([&] { mesh_rank_of(d, MeshCoord{2, 0, 0}); }).find("outside"),
            std::string::npos);
}

TEST(MeshLayout, AxisGroupsForDp2Tp2) {
  const ParallelDims d{2, 1, 2};
  // rank: 0=(0,0,0) 1=(0,0,1) 2=(1,0,0) 3=(1,0,1)
  EXPECT_EQ(mesh_axis_ranks(d, 0, MeshAxis::tp), (std::vector<int>{0, 1}));
  EXPECT_EQ(mesh_axis_ranks(d, 3, MeshAxis::tp), (std::vector<int>{2, 3}));
  EXPECT_EQ(mesh_axis_ranks(d, 1, MeshAxis::dp), (std::vector<int>{1, 3}));
  EXPECT_EQ(mesh_axis_ranks(d, 2, MeshAxis::dp), (std::vector<int>{0, 2}));
  EXPECT_EQ(mesh_axis_ranks(d, 2, MeshAxis::fsdp), (std::vector<int>{2}));
  EXPECT_EQ(mesh_axis_ranks(d, 3, MeshAxis::data), (std::vector<int>{1, 3}));
}

TEST(MeshLayout, AxisGroupsForFsdp2Tp2AndDataAxis) {
  const ParallelDims d{2, 2, 2};  // 8 ranks: data = dp x fsdp
  EXPECT_EQ(mesh_axis_ranks(d, 0, MeshAxis::fsdp), (std::vector<int>{0, 2}));
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::fsdp), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::dp), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh_axis_ranks(d, 5, MeshAxis::data), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(mesh_axis_ranks(d, 6, MeshAxis::data), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(mesh_axis_index(d, mesh_coord_of(d, 6), MeshAxis::data), 3);
}

TEST(Mesh, RejectsAWorldOfTheWrongSize) {
  auto w = test_world();
  const ParallelDims d{w->size() + 1, 1, 1};
  const std::string msg = error_message([&] { DeviceMesh m(d, *w); });
  EXPECT_NE(msg.find("needs " + std::to_string(w->size() + 1) + " ranks"), std::string::npos)
      << msg;
}

TEST(Mesh, DescribeTable) {
  const int p = test_world()->size();
  if (p != 4) GTEST_SKIP() << "the table checked here is the 4-rank dp=2 x tp=2 one";
  auto w = test_world();
  DeviceMesh m(ParallelDims{2, 1, 2}, *w);
  const std::string t = m.describe();
  EXPECT_NE(t.find("dp=2 x fsdp=1 x tp=2 (4 ranks)"), std::string::npos) << t;
  EXPECT_NE(t.find("  rank |   dp fsdp   tp | data\n"), std::string::npos) << t;
  EXPECT_NE(t.find("     0 |    0    0    0 |    0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("     1 |    0    0    1 |    0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("     2 |    1    0    0 |    1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("     3 |    1    0    1 |    1\n"), std::string::npos) << t;
  if (w->rank() == 0) std::printf("%s", t.c_str());
}

// Coordinates and membership: gathering world ranks over each axis must give
// exactly mesh_axis_ranks, in that order.
TEST(Mesh, CoordinatesAndAxisMembership) {
  auto w = test_world();
  for (const ParallelDims& d : mesh_layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    DeviceMesh m(d, *w);
    EXPECT_EQ(m.rank(), w->rank());
    EXPECT_EQ(m.coord(), mesh_coord_of(d, w->rank()));
    EXPECT_EQ(m.world().size(), w->size());
    EXPECT_EQ(m.world().rank(), w->rank());
    for (MeshAxis a : mesh_split_axes(d)) {
      SCOPED_TRACE(mesh_axis_name(a));
      Communicator& c = m.axis(a);
      EXPECT_EQ(c.name(), mesh_axis_name(a));
      EXPECT_EQ(c.size(), mesh_axis_size(d, a));
      EXPECT_EQ(c.rank(), mesh_axis_index(d, m.coord(), a));
      float me = static_cast<float>(w->rank());
      std::vector<float> got(static_cast<size_t>(c.size()));
      c.all_gather(&me, got.data(), 1).wait();
      const auto want = mesh_axis_ranks(d, w->rank(), a);
      for (size_t s = 0; s < want.size(); ++s) EXPECT_EQ(got[s], static_cast<float>(want[s]));
    }
    // An axis without a communicator of its own (dp_cp, fsdp_cp at cp = 1)
    // is its alias's: the same ranks in the same order.
    for (MeshAxis a : kMeshAxes) {
      if ((a == MeshAxis::ep || a == MeshAxis::edp) && d.ep == 1) {  // refused by name
        EXPECT_NE(error_message([&] { m.axis(a); })
                      .find(std::string("no ") + mesh_axis_name(a) + " communicator at parallel.ep=1"),
                  std::string::npos);
        continue;
      }
      const MeshAxis alias = mesh_axis_alias(d, a);
      EXPECT_EQ(&m.axis(a), &m.axis(alias)) << mesh_axis_name(a);
      EXPECT_EQ(mesh_axis_ranks(d, w->rank(), a), mesh_axis_ranks(d, w->rank(), alias));
    }
  }
}

// Every collective on every axis of mesh `m` (world rank g), with bytes
// against the formulas (p = the axis size).
void check_every_collective_on_every_axis(const DeviceMesh& m, int g) {
  const ParallelDims& d = m.dims();
  for (MeshAxis a : mesh_split_axes(d)) {
    Communicator& c = m.axis(a);
    const std::vector<int> members = mesh_axis_ranks(d, g, a);
    const int p = c.size(), me = c.rank();
    const float member_sum = static_cast<float>(std::accumulate(members.begin(), members.end(), 0));
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}}) {
      SCOPED_TRACE(d.str() + " axis " + mesh_axis_name(a) + " n=" + std::to_string(n));
      c.reset_bytes();
      double want_bytes = 0.0;
      const double b = 4.0 * n;

      auto x = filled(g, n);
      c.all_reduce_sum(x.data(), n).wait();
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = member_sum + 0.5f * p * i;
      EXPECT_TRUE(exactly(x, want)) << "all_reduce_sum";
      want_bytes += 2.0 * (p - 1) / p * b;

      auto in = filled(g, n * p);
      std::vector<float> out(static_cast<size_t>(n));
      c.reduce_scatter_sum(in.data(), out.data(), n).wait();
      for (int64_t i = 0; i < n; ++i)
        want[static_cast<size_t>(i)] = member_sum + 0.5f * p * static_cast<float>(me * n + i);
      EXPECT_TRUE(exactly(out, want)) << "reduce_scatter_sum";
      want_bytes += static_cast<double>(p - 1) / p * (b * p);

      auto mine = filled(g, n);
      std::vector<float> gathered(static_cast<size_t>(n * p));
      c.all_gather(mine.data(), gathered.data(), n).wait();
      std::vector<float> want_g;
      for (int s : members) {
        auto blk = filled(s, n);
        want_g.insert(want_g.end(), blk.begin(), blk.end());
      }
      EXPECT_TRUE(exactly(gathered, want_g)) << "all_gather";
      want_bytes += static_cast<double>(p - 1) / p * (b * p);

      const int root = p - 1;
      auto bc = filled(g, n);
      c.broadcast(bc.data(), n, root).wait();
      EXPECT_TRUE(exactly(bc, filled(members[static_cast<size_t>(root)], n))) << "broadcast";
      want_bytes += (me == root && p > 1) ? b : 0.0;

      if (p > 1) {  // in-axis ring: to me+1, from me-1
        std::vector<float> got(static_cast<size_t>(n), -1.f);
        auto sent = filled(g, n);
        CommHandle rh = c.recv(got.data(), n, (me + p - 1) % p);
        CommHandle sh = c.send(sent.data(), n, (me + 1) % p);
        sh.wait();
        rh.wait();
        EXPECT_TRUE(exactly(got, filled(members[static_cast<size_t>((me + p - 1) % p)], n)))
            << "send/recv";
        want_bytes += b;
      }

      {  // all_to_all_v: to axis rank q, (me + q) % 3 elements of value g + 0.25 q + i/8
        auto count = [](int from, int to) { return int64_t((from + to) % 3); };
        std::vector<int64_t> sc(static_cast<size_t>(p)), rc(static_cast<size_t>(p));
        std::vector<float> send, want_a;
        for (int q = 0; q < p; ++q) {
          sc[static_cast<size_t>(q)] = count(me, q);
          rc[static_cast<size_t>(q)] = count(q, me);
          for (int64_t i = 0; i < count(me, q); ++i) send.push_back(g + 0.25f * q + i / 8.f);
          for (int64_t i = 0; i < count(q, me); ++i)
            want_a.push_back(static_cast<float>(members[static_cast<size_t>(q)]) + 0.25f * me +
                             i / 8.f);
          if (q != me) want_bytes += 4.0 * count(me, q);
        }
        std::vector<float> got(want_a.size() + 1, -1.f);  // never empty
        c.all_to_all_v(send.data(), sc.data(), got.data(), rc.data(), 4).wait();
        got.pop_back();
        EXPECT_TRUE(exactly(got, want_a)) << "all_to_all_v";
      }

      EXPECT_EQ(c.all_reduce_i64(g, ReduceOp::sum),
                std::accumulate(members.begin(), members.end(), int64_t{0}));
      want_bytes += 2.0 * (p - 1) / p * 8.0;
      EXPECT_DOUBLE_EQ(c.bytes_sent(), want_bytes);
    }
  }
}

// Every layout over MPI.
TEST(Mesh, EveryCollectiveOnEveryAxis) {
  auto w = test_world();
  for (const ParallelDims& d : mesh_layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    check_every_collective_on_every_axis(DeviceMesh(d, *w), w->rank());
  }
}

// The same through make_device_mesh: mpi as DeviceMesh(dims, world), and
// mpi_staged with every axis and world a StagedCommunicator over the memcpy
// staging, which must then have carried the data of every collective.
TEST(Mesh, EveryCollectiveOnEveryAxisOfEachHostBackend) {
  auto w = test_world();
  for (const ParallelDims& d : mesh_layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    MeshCommOptions mpi;
    DeviceMesh plain = make_device_mesh(d, w.get(), mpi);
    EXPECT_EQ(dynamic_cast<StagedCommunicator*>(&plain.tp()), nullptr);
    check_every_collective_on_every_axis(plain, w->rank());

    auto staging = std::make_shared<MemcpyHostStaging>();
    MeshCommOptions opts;
    opts.backend = CommBackend::mpi_staged;
    opts.staging = staging;
    DeviceMesh m = make_device_mesh(d, w.get(), opts);
    EXPECT_EQ(m.rank(), w->rank());
    EXPECT_EQ(m.coord(), mesh_coord_of(d, w->rank()));
    ASSERT_NE(dynamic_cast<StagedCommunicator*>(&m.world()), nullptr);
    for (MeshAxis a : mesh_split_axes(m.dims())) ASSERT_NE(dynamic_cast<StagedCommunicator*>(&m.axis(a)), nullptr);
    check_every_collective_on_every_axis(m, w->rank());
    EXPECT_GT(staging->bytes_to_host(), 0);
    EXPECT_GT(staging->bytes_to_device(), 0);
    // The world communicator is staged too (the trainer's agreement and
    // loss reductions go through it).
    float x = static_cast<float>(w->rank());
    m.world().all_reduce_sum(&x, 1).wait();
    EXPECT_EQ(x, static_cast<float>(w->size() * (w->size() - 1) / 2));
  }
}

TEST(Mesh, FactoryWithoutMpiAndItsErrors) {
  // No MPI world: one rank, in-process axes (staged or not).
  MeshCommOptions opts;
  DeviceMesh solo = make_device_mesh(ParallelDims{1, 1, 1}, nullptr, opts);
  EXPECT_EQ(solo.world().size(), 1);
  check_every_collective_on_every_axis(solo, 0);
  opts.backend = CommBackend::mpi_staged;
  opts.staging = std::make_shared<MemcpyHostStaging>();
  DeviceMesh staged = make_device_mesh(ParallelDims{1, 1, 1}, nullptr, opts);
  ASSERT_NE(dynamic_cast<StagedCommunicator*>(&staged.fsdp()), nullptr);
  std::vector<float> in = filled(0, 6), out(6, -1.f);
  staged.fsdp().reduce_scatter_sum(in.data(), out.data(), 6).wait();
  EXPECT_TRUE(exactly(out, in));

  EXPECT_NE(error_message([] { make_device_mesh(ParallelDims{2, 1, 1}, nullptr, MeshCommOptions{}); })
                .find("runs without MPI"),
            std::string::npos);
  MeshCommOptions no_staging;
  no_staging.backend = CommBackend::mpi_staged;
  EXPECT_NE(error_message([&] { make_device_mesh(ParallelDims{1, 1, 1}, nullptr, no_staging); })
                .find("needs a HostStaging"),
            std::string::npos);
  MeshCommOptions no_builder;
  no_builder.backend = CommBackend::nccl;
  const std::string msg =
      error_message([&] { make_device_mesh(ParallelDims{1, 1, 1}, nullptr, no_builder); });
  EXPECT_NE(msg.find("nccl backend needs a builder"), std::string::npos) << msg;
  EXPECT_STREQ(comm_backend_name(CommBackend::mpi_staged), "mpi_staged");
}

// A backend whose communicators do not fit the layout fails by axis.
TEST(Mesh, RejectsCommunicatorsThatDoNotFitTheLayout) {
  auto w = test_world();
  if (w->size() < 2) GTEST_SKIP() << "needs an axis of 2 ranks";
  const ParallelDims d{1, 1, w->size()};
  MeshComms comms = split_mpi_mesh(d, *w);
  // Swap tp (all ranks) with fsdp (one rank): both are wrong for their slot.
  std::swap(comms.axes[static_cast<size_t>(MeshAxis::tp)],
            comms.axes[static_cast<size_t>(MeshAxis::fsdp)]);
  const std::string msg = error_message([&] { DeviceMesh m(d, w->rank(), std::move(comms)); });
  EXPECT_NE(msg.find("expected axis fsdp as rank 0 of 1"), std::string::npos) << msg;
}

// Collectives on different axes in flight at once (a TP all-reduce while the
// data axis gathers), waited in reverse order.
TEST(Mesh, OverlapAcrossAxes) {
  auto w = test_world();
  const int g = w->rank();
  for (const ParallelDims& d : mesh_layouts_for(w->size())) {
    SCOPED_TRACE(d.str());
    DeviceMesh m(d, *w);
    const auto tp_members = mesh_axis_ranks(d, g, MeshAxis::tp);
    const auto data_members = mesh_axis_ranks(d, g, MeshAxis::data);
    auto x = filled(g, 33);
    auto mine = filled(g, 7);
    std::vector<float> gathered(static_cast<size_t>(7 * m.data().size()));
    CommHandle h_tp = m.tp().all_reduce_sum(x.data(), 33);
    CommHandle h_data = m.data().all_gather(mine.data(), gathered.data(), 7);
    h_data.wait();
    h_tp.wait();
    const float s = static_cast<float>(std::accumulate(tp_members.begin(), tp_members.end(), 0));
    EXPECT_EQ(x[32], s + 0.5f * m.tp().size() * 32);
    for (size_t k = 0; k < data_members.size(); ++k)
      EXPECT_EQ(gathered[k * 7 + 6], fill_value(data_members[k], 6));
  }
}

}  // namespace
}  // namespace gt::test
