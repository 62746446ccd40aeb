// NcclCommunicator on device buffers, against the closed-form results the MPI
// tests use. Every test skips (GTEST_SKIP) unless this host has a GPU for each
// of its ranks (NCCL refuses two ranks on one GPU), so CI reports them
// skipped; a machine with GPUs runs them under mpirun at 1, 2 and 4 ranks.
#if TRAINER_HAVE_NCCL

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_resources.hpp"
#include "mpi_test_util.hpp"
#include "parallel/collective_matmul.hpp"
#include "parallel/nccl_communicator.hpp"
#if defined(TRAINER_CUDA_EMULATOR)
#include "gt_emu/control.hpp"
#endif

namespace gt::test {
namespace {

// Ranks on this host and this rank's index among them.
void local_rank_and_size(int* rank, int* size) {
  MPI_Comm local = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, rank);
  MPI_Comm_size(local, size);
  MPI_Comm_free(&local);
}

// A world NCCL communicator on this rank's GPU, or null with the skip reason
// (decided the same way on every rank of a host, so no rank waits alone).
struct NcclWorld {
  std::unique_ptr<MpiCommunicator> mpi;
  std::unique_ptr<cuda::CudaStream> compute;
  std::unique_ptr<NcclCommunicator> nccl;
  std::string skip;
};

struct DeviceFloats;
// What the host sees of `x` once the collectives waited on the device have
// drained (with their deadlines) and the compute stream ordered after them
// has run: a wait() alone does not block the host.
std::vector<float> read(NcclWorld& w, const DeviceFloats& x);

NcclWorld make_world(double deadline_s = kTestDeadlineS) {
  NcclWorld w;
  w.mpi = test_world("nccl-bootstrap");
  int local = 0, local_size = 1;
  local_rank_and_size(&local, &local_size);
  const int devices = cuda::cuda_device_count();
  const int64_t short_everywhere =
      w.mpi->all_reduce_i64(devices < local_size ? 1 : 0, ReduceOp::max);
  if (short_everywhere) {
    w.skip = "needs one GPU per rank on each host (" + std::to_string(devices) + " GPU(s) for " +
             std::to_string(local_size) + " local rank(s))";
    return w;
  }
  CUDA_CHECK(cudaSetDevice(local));
  w.compute = std::make_unique<cuda::CudaStream>();
  w.nccl = NcclCommunicator::create(*w.mpi, local, w.compute->get(), "nccl-world", deadline_s);
  return w;
}

// Device copy of host floats, and back.
struct DeviceFloats {
  cuda::DeviceBuffer buf;
  int64_t n;
  explicit DeviceFloats(const std::vector<float>& host)
      : buf(host.size() * sizeof(float)), n(static_cast<int64_t>(host.size())) {
    if (n) CUDA_CHECK(cudaMemcpy(buf.data(), host.data(), host.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
  }
  float* get() const { return buf.as<float>(); }
  std::vector<float> host() const {
    std::vector<float> out(static_cast<size_t>(n));
    if (n) CUDA_CHECK(cudaMemcpy(out.data(), buf.data(), out.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost));
    return out;
  }
};

std::vector<float> read(NcclWorld& w, const DeviceFloats& x) {
  w.nccl->drain();
  w.compute->synchronize();
  return x.host();
}

// Runs `body` once per stream order the device offers: on the emulated
// device in issue order and newest-first (the legal order in which a missing
// wait shows), on a GPU once, in the device's own.
template <typename F>
void for_each_stream_order(F&& body) {
#if defined(TRAINER_CUDA_EMULATOR)
  for (const char* order : {"issue", "reverse"}) {
    SCOPED_TRACE(order);
    ASSERT_TRUE(gt::emu::set_stream_order(order));
    body();
  }
  gt::emu::set_stream_order("issue");
#else
  body();
#endif
}

#define NCCL_WORLD_OR_SKIP(w)            \
  NcclWorld w = make_world();            \
  if (!w.nccl) GTEST_SKIP() << w.skip

TEST(NcclCommunicator, AllReduceSumAndMax) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    DeviceFloats x(filled(r, n));
    w.nccl->all_reduce_sum(x.get(), n).wait();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
    EXPECT_TRUE(exactly(read(w, x), want));
    DeviceFloats y(filled(r, n));
    w.nccl->all_reduce_max(y.get(), n).wait();
    EXPECT_TRUE(exactly(read(w, y), filled(p - 1, n)));
  }
  EXPECT_DOUBLE_EQ(w.nccl->bytes_sent(),
                   [&] {
                     double b = 0;
                     for (int64_t n : test_counts()) b += 2 * ring_volume::all_reduce(p, 4.0 * n);
                     return b;
                   }());
}

// Device copy of host bf16 bits, and back.
struct DeviceBf16 {
  cuda::DeviceBuffer buf;
  int64_t n;
  explicit DeviceBf16(const std::vector<uint16_t>& host)
      : buf(host.size() * sizeof(uint16_t)), n(static_cast<int64_t>(host.size())) {
    if (n)
      CUDA_CHECK(cudaMemcpy(buf.data(), host.data(), host.size() * sizeof(uint16_t),
                            cudaMemcpyHostToDevice));
  }
  uint16_t* get() const { return buf.as<uint16_t>(); }
};

std::vector<float> read(NcclWorld& w, const DeviceBf16& x) {
  w.nccl->drain();
  w.compute->synchronize();
  std::vector<uint16_t> bits(static_cast<size_t>(x.n));
  if (x.n)
    CUDA_CHECK(cudaMemcpy(bits.data(), x.buf.data(), bits.size() * sizeof(uint16_t),
                          cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// ncclBfloat16 sums, exact on bf16_filled values (mpi_test_util.hpp), and on
// rough values what expect_rough_bf16_sums allows.
TEST(NcclCommunicator, Bf16AllReduceAndReduceScatter) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  double want_bytes = 0;
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    DeviceBf16 x(bf16_filled(r, n));
    w.nccl->all_reduce_sum_bf16(x.get(), n).wait();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = bf16_fill_sum(p, i);
    EXPECT_TRUE(exactly(read(w, x), want));

    DeviceBf16 in(bf16_filled(r, n * p)), out(std::vector<uint16_t>(static_cast<size_t>(n)));
    w.nccl->reduce_scatter_sum_bf16(in.get(), out.get(), n).wait();
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = bf16_fill_sum(p, r * n + i);
    EXPECT_TRUE(exactly(read(w, out), want));
    want_bytes += ring_volume::all_reduce(p, 2.0 * n) + ring_volume::reduce_scatter(p, 2.0 * n);
  }
  EXPECT_DOUBLE_EQ(w.nccl->bytes_sent(), want_bytes);

  const int64_t n = 1001;
  std::vector<uint16_t> rough(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) rough[static_cast<size_t>(i)] = bf16_rough_value(r, i);
  DeviceBf16 x(rough);
  w.nccl->all_reduce_sum_bf16(x.get(), n).wait();
  expect_rough_bf16_sums(read(w, x), p, *w.mpi);
}

TEST(NcclCommunicator, ReduceScatterAndAllGatherInPlace) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for (int64_t n : test_counts()) {
    SCOPED_TRACE("n=" + std::to_string(n));
    DeviceFloats in(filled(r, n * p)), out(std::vector<float>(static_cast<size_t>(n), -1.f));
    w.nccl->reduce_scatter_sum(in.get(), out.get(), n).wait();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(i)] =
          static_cast<float>(p * (p - 1) / 2) + 0.5f * p * static_cast<float>(r * n + i);
    EXPECT_TRUE(exactly(read(w, out), want));

    std::vector<float> blocks(static_cast<size_t>(n * p), -1.f), all;
    auto mine = filled(r, n);
    std::copy(mine.begin(), mine.end(), blocks.begin() + r * n);
    DeviceFloats gathered(blocks);
    w.nccl->all_gather(gathered.get() + r * n, gathered.get(), n).wait();
    for (int s = 0; s < p; ++s) {
      auto b = filled(s, n);
      all.insert(all.end(), b.begin(), b.end());
    }
    EXPECT_TRUE(exactly(read(w, gathered), all));
  }
}

// A collective sees what the compute stream wrote before it started, with no
// host synchronisation in between: the communicator orders its own stream
// after the compute stream with an event. On the emulated device the streams
// also run newest-first, the legal order in which a missing wait shows.
TEST(NcclCommunicator, CollectivesSeeTheComputeStreamsEarlierWork) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for_each_stream_order([&] {
    const int64_t n = 1000;
    DeviceFloats x(std::vector<float>(static_cast<size_t>(n), -1.f));
    // Every byte 0x40 + rank: positive floats growing with the rank.
    CUDA_CHECK(cudaMemsetAsync(x.get(), 0x40 + r, n * sizeof(float), w.compute->get()));
    w.nccl->all_reduce_max(x.get(), n).wait();
    uint32_t bits = 0;
    std::memset(&bits, 0x40 + p - 1, sizeof bits);
    float want = 0.f;
    std::memcpy(&want, &bits, sizeof want);
    EXPECT_TRUE(exactly(read(w, x), std::vector<float>(static_cast<size_t>(n), want)));
  });
}

TEST(NcclCommunicator, BroadcastScalarsAndBarrier) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for (int root = 0; root < p; ++root) {
    DeviceFloats x(filled(r, 33));
    w.nccl->broadcast(x.get(), 33, root).wait();
    EXPECT_TRUE(exactly(read(w, x), filled(root, 33)));
  }
  EXPECT_EQ(w.nccl->all_reduce_f64(r + 0.5, ReduceOp::sum), p * (p - 1) / 2.0 + 0.5 * p);
  EXPECT_EQ(w.nccl->all_reduce_i64(r, ReduceOp::max), p - 1);
  EXPECT_EQ(w.nccl->all_reduce_i64(r, ReduceOp::min), 0);
  w.nccl->barrier();
}

// The collective-matmul ring on device buffers: its receive-then-send steps
// only work because NCCL point-to-point is launched as one group.
TEST(NcclCommunicator, RingAllGatherThroughGroupedSendRecv) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  const int64_t chunk = 1001;
  std::vector<float> host(static_cast<size_t>(chunk * p), -1.f), want;
  auto mine = filled(r, chunk);
  std::copy(mine.begin(), mine.end(), host.begin() + r * chunk);
  DeviceFloats full(host);
  std::vector<int> seen;
  all_gather_then_compute(
      *w.nccl, full.get(), chunk,
      [&](int first, int n) {
        for (int c = first; c < first + n; ++c) seen.push_back(c);
      },
      /*overlap=*/true);
  for (int s = 0; s < p; ++s) {
    auto b = filled(s, chunk);
    want.insert(want.end(), b.begin(), b.end());
  }
  EXPECT_TRUE(exactly(read(w, full), want));
  EXPECT_EQ(static_cast<int>(seen.size()), p);
}

// all_to_all_v as grouped ncclSend/ncclRecv in bytes: uneven blocks, empty
// ones skipped alike on both sides (a rank that sends or receives nothing),
// the block to itself, bf16-wide elements, in both stream orders.
TEST(NcclCommunicator, AllToAllVWithUnevenAndEmptyBlocks) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for_each_stream_order([&] {
    for (int shift = 0; shift < 3; ++shift) {
      SCOPED_TRACE("shift " + std::to_string(shift));
      // rank a sends 2 x ((a + 2b + shift) % 4) 16-bit elements to rank b.
      auto count = [&](int a, int b) { return int64_t(2 * ((a + 2 * b + shift) % 4)); };
      std::vector<int64_t> sc(static_cast<size_t>(p)), rc(static_cast<size_t>(p));
      std::vector<float> send, want;  // pairs of 16-bit elements as floats
      for (int q = 0; q < p; ++q) {
        sc[static_cast<size_t>(q)] = count(r, q);
        rc[static_cast<size_t>(q)] = count(q, r);
        for (int64_t i = 0; i < count(r, q) / 2; ++i) send.push_back(100.f * r + 10.f * q + i);
        for (int64_t i = 0; i < count(q, r) / 2; ++i) want.push_back(100.f * q + 10.f * r + i);
      }
      send.push_back(0.f);  // never an empty buffer
      DeviceFloats in(send), out(std::vector<float>(want.size() + 1, -1.f));
      w.nccl->reset_bytes();
      w.nccl->all_to_all_v(in.get(), sc.data(), out.get(), rc.data(), 2).wait();
      std::vector<float> got = read(w, out);
      EXPECT_EQ(got.back(), -1.f) << "wrote past the received elements";
      got.pop_back();
      EXPECT_TRUE(exactly(got, want));
      double away = 0;
      for (int q = 0; q < p; ++q)
        if (q != r) away += 2.0 * static_cast<double>(count(r, q));
      EXPECT_DOUBLE_EQ(w.nccl->bytes_sent(), away);
    }
  });
}

TEST(NcclCommunicator, SplitIntoHalves) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  auto half = w.nccl->split(r % 2, r, "half");
  EXPECT_EQ(half->size(), (p + 1 - r % 2) / 2);
  EXPECT_EQ(half->rank(), r / 2);
  EXPECT_EQ(half->all_reduce_i64(1, ReduceOp::sum), half->size());
}

TEST(NcclCommunicator, DeadlineAbortsAndNamesTheOp) {
  NcclWorld w = make_world(/*deadline_s=*/0.5);
  if (!w.nccl) GTEST_SKIP() << w.skip;
  // A receive from the next rank that never sends: the deadline must fire
  // (and abort the NCCL communicator so no kernel spins on).
  DeviceFloats x(filled(0, 7));
  const int from = (w.nccl->rank() + 1) % w.nccl->size();
  CommHandle h = w.nccl->recv(x.get(), 7, from, 5);
  h.wait();  // on the device: the host goes on, and drain() keeps the deadline
  EXPECT_TRUE(h.done());
  const std::string msg = error_message([&] { w.nccl->drain(); });
  EXPECT_NE(msg.find("recv of 7 floats"), std::string::npos) << msg;
  EXPECT_NE(msg.find("deadline of 0.5 s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'nccl-world'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("was aborted"), std::string::npos) << msg;
}

// The job's step and phase (the CollectiveContext the trainer keeps on the
// MPI world) reach NCCL's deadline errors: the communicator takes the
// bootstrap's context, and a wait records where the job was.
TEST(NcclCommunicator, DeadlineErrorsNameTheJobsStepAndPhase) {
  auto context = std::make_shared<CollectiveContext>();
  context->step = 7;
  context->phase = "train";
  auto bootstrap = test_world("nccl-bootstrap-ctx");
  bootstrap->set_context(context);
  int local = 0, local_size = 1;
  local_rank_and_size(&local, &local_size);
  if (bootstrap->all_reduce_i64(cuda::cuda_device_count() < local_size ? 1 : 0, ReduceOp::max))
    GTEST_SKIP() << "needs one GPU per rank";
  CUDA_CHECK(cudaSetDevice(local));
  cuda::CudaStream compute;
  auto nccl = NcclCommunicator::create(*bootstrap, local, compute.get(), "nccl-ctx", 0.5);
  auto half = nccl->split(0, nccl->rank(), "nccl-ctx-split");  // inherits the context
  DeviceFloats x(filled(0, 3));
  CommHandle h = half->recv(x.get(), 3, (half->rank() + 1) % half->size(), 1);
  h.wait();
  context->step = 8;  // what the wait saw is what the error names
  const std::string msg = error_message([&] { half->drain(); });
  EXPECT_NE(msg.find("step 7 (train): recv of 3 floats"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'nccl-ctx-split'"), std::string::npos) << msg;
  bootstrap->set_context(nullptr);
}

// wait() orders the compute stream after the collective, without the host
// waiting: compute queued after it reads the result, here a copy on the
// compute stream to pinned memory that the host reads after synchronising
// that stream alone. The other ranks join late, so without the device-side
// wait rank 0's copy reads the old values (the planted bug "removed the
// consumer's wait on a collective" is caught so, every time).
TEST(NcclCommunicator, WaitOrdersTheComputeStreamAfterTheCollective) {
  NCCL_WORLD_OR_SKIP(w);
  const int p = w.nccl->size(), r = w.nccl->rank();
  for_each_stream_order([&] {
    const int64_t n = 1001;
    DeviceFloats x(filled(r, n));
    cuda::PinnedBuffer host(static_cast<size_t>(n) * sizeof(float));
    // The other ranks join late, so the collective cannot have finished when
    // rank 0's copy is queued: only the device-side wait orders the copy.
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    w.nccl->all_reduce_sum(x.get(), n).wait();
    CUDA_CHECK(cudaMemcpyAsync(host.data(), x.get(), static_cast<size_t>(n) * sizeof(float),
                               cudaMemcpyDeviceToHost, w.compute->get()));
    w.compute->synchronize();
    const float* got = host.as<float>();
    std::vector<float> want(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      want[static_cast<size_t>(i)] = static_cast<float>(p * (p - 1) / 2) + 0.5f * p * i;
    EXPECT_TRUE(exactly(std::vector<float>(got, got + n), want));
    w.nccl->drain();  // already complete: returns at once
  });
}

}  // namespace
}  // namespace gt::test

#endif  // TRAINER_HAVE_NCCL
