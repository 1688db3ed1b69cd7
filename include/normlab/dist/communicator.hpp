#pragma once
// The processes of a data-parallel run and the two collectives normlab needs, behind one interface
// with two implementations: MPI (built with NORMLAB_MPI and launched by mpirun) and a single
// process (size 1, every collective is the identity). Nothing outside src/dist/ includes <mpi.h>.
//
// sum() is deterministic by construction: the bits of the result depend only on the inputs and
// the number of ranks, never on which algorithm the MPI library picks for MPI_Allreduce:
//
//   values (n) on every rank, split into `size` contiguous slices (slice_bounds)
//   MPI_Alltoallv:  rank s receives slice s from every rank          (size, len_s)
//   each rank adds its slice over the ranks in rank order, in double  (len_s)
//   MPI_Allgatherv: every rank receives every summed slice           (n)
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace normlab::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // values[i] <- sum over ranks r = 0, 1, ... of values[i] on rank r, identical on every rank.
  virtual void sum(std::span<double> values) = 0;
  // Every rank's value, in rank order.
  virtual std::vector<uint64_t> all_gather(uint64_t value) = 0;
  // "MPI (OpenMPI ...)" or "single process", for logs.
  virtual std::string describe() const = 0;
  // The flag a stop signal sets (nullptr: none). MPI: a rank that has been waiting in a collective
  // for kDeadPeerSeconds since such a signal arrived ends the process with a one-line error, since
  // mpirun signals the survivors when a rank dies and they would otherwise wait forever for it.
  virtual void watch_stop_flag(const std::atomic<int>* flag) { (void)flag; }

  // A check that can fail on some ranks only (the run-directory lock rank 0 takes, a file one
  // machine cannot read, memory) is agreed before the first step, so that every rank stops
  // together instead of leaving the others blocked in a collective. Every rank passes its own
  // (code, message), code 0 for "fine"; every rank gets back the lowest rank whose code is not 0,
  // with that rank's code and message ({0, 0, ""} when all are fine).
  struct Verdict {
    int code = 0;
    int rank = 0;
    std::string message;
  };
  virtual Verdict agree(int code, const std::string& message) = 0;

  // Ends every process of the job at once with `code` (MPI_Abort): for an error one rank meets
  // after the ranks agreed to start, which the others cannot learn of and would wait for forever.
  // Single process: returns (the caller exits normally).
  virtual void abort_all(int code) { (void)code; }
};

// Seconds a rank waits in a collective after a stop signal before it concludes a peer is dead
// (longer than rank 0 may spend evaluating or checkpointing while the others wait).
inline constexpr double kDeadPeerSeconds = 30.0;
// Seconds any collective may take (NORMLAB_DIST_TIMEOUT overrides) before the rank gives up.
inline constexpr double kCollectiveTimeoutSeconds = 600.0;

// The single-process communicator: rank 0 of 1.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void sum(std::span<double>) override {}
  std::vector<uint64_t> all_gather(uint64_t value) override { return {value}; }
  Verdict agree(int code, const std::string& message) override { return {code, 0, code != 0 ? message : ""}; }
  std::string describe() const override { return "single process"; }
};

// The process count a launcher announced in the environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
// PMIX_SIZE, SLURM_NTASKS under srun); 1 when there is none.
int launcher_world_size();
// This process's rank as the launcher announced it (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK);
// 0 when there is none. Read without starting MPI (for verbs that refuse a multi-process launch).
int launcher_rank();

// This process's communicator, created on first use: MPI_COMM_WORLD when launched with more than
// one process, else SingleProcess. InputError if launched with more than one process by a normlab
// built without MPI (it cannot run data-parallel). MPI is finalized at exit.
Communicator& world();

// True if this build can run data-parallel (configured with NORMLAB_MPI and MPI found).
bool built_with_mpi();

// [begin, end) of slice `index` of `n` values cut into `parts` contiguous slices whose lengths
// differ by at most one (the first n % parts slices are one longer).
std::pair<int64_t, int64_t> slice_bounds(int64_t n, int parts, int index);

// The sum the MPI implementation computes, on one process: inputs[r] is rank r's buffer; returns
// the element-wise sum in rank order in double. For tests and for the single-process emulation.
std::vector<double> sum_in_rank_order(const std::vector<std::vector<double>>& inputs);

}  // namespace normlab::dist
