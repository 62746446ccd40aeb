// MpiSession: MPI's lifetime as an object. The constructor initialises MPI
// (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; FUNNELED is accepted and
// logged, anything less is an error) unless it was already initialised (by a
// launcher or a host library), and the destructor finalises only what it
// initialised. Construct exactly one, first thing in main(), and let every
// communicator die before it does.
//
// It also answers the bootstrap questions (nccl-tests' pattern): world rank
// and size, and the local rank on this host from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), which picks the GPU.
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

namespace gt {

class MpiSession {
 public:
  // argc/argv may be null. The logger defaults to spdlog's default logger.
  MpiSession(int* argc, char*** argv, std::shared_ptr<spdlog::logger> log = nullptr);
  ~MpiSession();  // MPI_Finalize if this session initialised MPI; never throws
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  // True when this object called MPI_Init_thread (and so will finalise).
  bool initialised_here() const { return initialised_here_; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_*
  const char* thread_level_name() const;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this host
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }

 private:
  bool initialised_here_ = false;
  int thread_level_ = 0;
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string host_;
  std::shared_ptr<spdlog::logger> log_;
};

// For main(): one rank has failed and the others would wait forever in their
// next collective. Prints "[rank r on host] fatal: msg" to stderr and calls
// MPI_Abort(MPI_COMM_WORLD, code), which ends every rank of the job. Without
// MPI running it prints the same line and exits with `code`.
[[noreturn]] void abort_job(int code, const std::string& msg);

}  // namespace gt
