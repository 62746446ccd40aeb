// MpiCommunicator: the MPI backend of Communicator, on host fp32 buffers.
// Every collective is the non-blocking MPI call (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Isend/Irecv);
// its MPI_Request lives in the returned CommHandle. Waiting with a deadline
// polls MPI_Test with short sleeps (MPI_Test also drives Open MPI's progress)
// and throws gt::Error naming the op, its element count and this
// communicator's name when the deadline passes.
//
// Ownership: the object owns its MPI_Comm and frees it in the destructor
// (after MPI_Finalize that is skipped: MPI has already released it). Every
// communicator gets MPI_ERRORS_RETURN so MPI_CHECK can turn errors into
// gt::Error. Handles must be completed before their communicator is destroyed.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "parallel/collective_context.hpp"
#include "parallel/communicator.hpp"

namespace gt {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (it is freed with MPI_Comm_free). deadline_s is
  // the default for wait() and for the blocking calls (0 = wait forever).
  MpiCommunicator(MPI_Comm comm, std::string name, double deadline_s = 0.0,
                  std::shared_ptr<spdlog::logger> log = nullptr);
  ~MpiCommunicator() override;

  // A private copy of `comm` (MPI_Comm_dup, collective over comm), so our
  // traffic can never match anyone else's messages on the same group.
  static std::unique_ptr<MpiCommunicator> dup(MPI_Comm comm, std::string name,
                                              double deadline_s = 0.0,
                                              std::shared_ptr<spdlog::logger> log = nullptr);
  // MPI_Comm_split of this communicator (collective): ranks with the same
  // color form a group, ordered by key. Inherits the deadline and logger.
  std::unique_ptr<MpiCommunicator> split(int color, int key, std::string name) const;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  MPI_Comm comm() const { return comm_; }

  double deadline() const { return deadline_s_; }
  void set_deadline(double seconds);

  // What the job is doing (step, phase), named in deadline errors; with
  // context->abort_on_deadline a missed deadline aborts the job (see
  // collective_context.hpp). Null (the default) = no context, throw.
  // Communicators split from this one afterwards share it.
  void set_context(std::shared_ptr<const CollectiveContext> context);
  const std::shared_ptr<const CollectiveContext>& context() const { return context_; }

 protected:
  CommHandle do_all_reduce(float* buf, int64_t n, ReduceOp op) override;
  CommHandle do_reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  CommHandle do_all_reduce_sum_bf16(uint16_t* buf, int64_t n) override;
  CommHandle do_reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override;
  CommHandle do_all_gather(const float* in, float* out, int64_t n) override;
  CommHandle do_broadcast(float* buf, int64_t n, int root) override;
  CommHandle do_send(const float* buf, int64_t n, int peer, int tag) override;
  CommHandle do_recv(float* buf, int64_t n, int peer, int tag) override;
  double do_all_reduce_f64(double value, ReduceOp op) override;
  int64_t do_all_reduce_i64(int64_t value, ReduceOp op) override;
  void do_barrier() override;
  CommHandle do_all_to_all_v(const void* in, const int64_t* send_counts, void* out,
                             const int64_t* recv_counts, int elem_bytes) override;

 private:
  // `scratch` is kept alive by the pending op (for buffers the op itself owns).
  CommHandle make_handle(MPI_Request req, const char* op, int64_t n, const char* unit,
                         std::shared_ptr<void> scratch = nullptr) const;

  // MPI has no bf16 type: bf16 travels as MPI_UINT16_T and is summed by this
  // user operation (fp32 add, rounded to bf16). Created with the
  // communicator, freed with it (before MPI_Finalize, like the comm).
  class Bf16SumOp {
   public:
    Bf16SumOp();
    ~Bf16SumOp();
    Bf16SumOp(const Bf16SumOp&) = delete;
    Bf16SumOp& operator=(const Bf16SumOp&) = delete;
    MPI_Op get() const { return op_; }

   private:
    MPI_Op op_ = MPI_OP_NULL;
  };

  Bf16SumOp bf16_sum_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  double deadline_s_ = 0.0;
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<const CollectiveContext> context_;
  std::vector<int> world_ranks_;  // rank in this communicator -> rank in MPI_COMM_WORLD
};

// Gives `comm` (and the communicators split from it meanwhile) `context` for
// this object's lifetime and clears it on `comm` afterwards, so collectives
// after a training run neither report its last step nor inherit its abort
// policy. Null comm: does nothing.
class ScopedCollectiveContext {
 public:
  ScopedCollectiveContext(MpiCommunicator* comm, std::shared_ptr<const CollectiveContext> context)
      : comm_(comm) {
    if (comm_) comm_->set_context(std::move(context));
  }
  ~ScopedCollectiveContext() {
    if (comm_) comm_->set_context(nullptr);
  }
  ScopedCollectiveContext(const ScopedCollectiveContext&) = delete;
  ScopedCollectiveContext& operator=(const ScopedCollectiveContext&) = delete;

 private:
  MpiCommunicator* comm_;
};

}  // namespace gt
