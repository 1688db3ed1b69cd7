// The MPI communicator (only with NORMLAB_HAVE_MPI) and the single-process fallback.
#include "normlab/dist/communicator.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <thread>

#include "normlab/error.hpp"

#ifdef NORMLAB_HAVE_MPI
#include <mpi.h>
#endif

namespace normlab::dist {

std::pair<int64_t, int64_t> slice_bounds(int64_t n, int parts, int index) {
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

std::vector<double> sum_in_rank_order(const std::vector<std::vector<double>>& inputs) {
  if (inputs.empty()) return {};
  std::vector<double> total(inputs[0].size(), 0.0);
  for (const std::vector<double>& input : inputs)
    for (size_t i = 0; i < total.size(); ++i) total[i] += input[i];
  return total;
}

int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* value = std::getenv(name)) {
      const int size = std::atoi(value);
      if (size > 0) return size;
    }
  }
  return 1;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* value = std::getenv(name)) {
      const int rank = std::atoi(value);
      if (rank >= 0) return rank;
    }
  }
  return 0;
}

#ifdef NORMLAB_HAVE_MPI

bool built_with_mpi() { return true; }

namespace {

// An MPI call's error as an exception: with MPI_ERRORS_RETURN a failed collective (a dead peer)
// comes back here instead of aborting without a word.
void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(fmt::format("data-parallel: {} failed ({}); another rank has probably died", what,
                                       std::string(text, size_t(length))));
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// While a collective runs, a second thread watches it: a peer that died leaves this rank blocked
// inside MPI for good (and mpirun's SIGTERM only sets the stop flag), so the watchdog ends the
// process with one line instead of a hang.
class Watchdog {
 public:
  explicit Watchdog(int rank) : rank_(rank) {
    if (const char* value = std::getenv("NORMLAB_DIST_TIMEOUT"))
      timeout_s_ = std::atof(value) > 0 ? std::atof(value) : timeout_s_;
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    done_.store(true);
    thread_.join();
  }
  void watch(const std::atomic<int>* flag) { flag_.store(flag); }
  void enter() { since_ns_.store(now_ns()); }
  void leave() { since_ns_.store(0); }

 private:
  void loop() {
    int64_t stop_seen_ns = 0;
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int64_t since = since_ns_.load();
      const std::atomic<int>* flag = flag_.load();
      const int64_t now = now_ns();
      if (flag != nullptr && flag->load() != 0 && stop_seen_ns == 0) stop_seen_ns = now;
      if (since == 0) continue;
      const double waited = double(now - std::max(since, stop_seen_ns)) * 1e-9;
      const bool stopping = stop_seen_ns != 0;
      if ((stopping && waited > kDeadPeerSeconds) || double(now - since) * 1e-9 > timeout_s_) {
        std::fprintf(stderr,
                     "normlab: error: data-parallel rank %d: no answer from the other ranks for %.0f s%s; a rank has "
                     "probably died (the run directory keeps its last checkpoint: resume with the same -np)\n",
                     rank_, stopping ? waited : double(now - since) * 1e-9, stopping ? " after a stop signal" : "");
        std::fflush(stderr);
        ::_exit(1);
      }
    }
  }

  int rank_;
  double timeout_s_ = kCollectiveTimeoutSeconds;
  std::atomic<bool> done_{false};
  std::atomic<int64_t> since_ns_{0};
  std::atomic<const std::atomic<int>*> flag_{nullptr};
  std::thread thread_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // One thread calls MPI; OpenMP threads never do.
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    watchdog_ = std::make_unique<Watchdog>(rank_);
  }
  ~MpiCommunicator() override {
    watchdog_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void watch_stop_flag(const std::atomic<int>* flag) override { watchdog_->watch(flag); }

  void sum(std::span<double> values) override {
    Watched watched(*watchdog_);
    const int64_t n = static_cast<int64_t>(values.size());
    if (n > int64_t{1} << 30) throw std::runtime_error("data-parallel: reduction buffer too large");
    // Send slice s of my buffer to rank s; receive my slice from every rank, rank after rank.
    const size_t ranks = static_cast<size_t>(size_);
    std::vector<int> send_counts(ranks), send_displs(ranks);
    for (int s = 0; s < size_; ++s) {
      auto [begin, end] = slice_bounds(n, size_, s);
      send_counts[size_t(s)] = int(end - begin);
      send_displs[size_t(s)] = int(begin);
    }
    const int mine = send_counts[size_t(rank_)];
    received_.assign(static_cast<size_t>(mine) * ranks, 0.0);  // (size, mine)
    std::vector<int> receive_counts(ranks, mine), receive_displs(ranks);
    for (int s = 0; s < size_; ++s) receive_displs[size_t(s)] = s * mine;
    check(MPI_Alltoallv(values.data(), send_counts.data(), send_displs.data(), MPI_DOUBLE, received_.data(),
                        receive_counts.data(), receive_displs.data(), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Alltoallv");
    std::vector<double> slice(size_t(mine), 0.0);
    for (int s = 0; s < size_; ++s)
      for (int i = 0; i < mine; ++i) slice[size_t(i)] += received_[size_t(s) * size_t(mine) + size_t(i)];
    check(MPI_Allgatherv(slice.data(), mine, MPI_DOUBLE, values.data(), send_counts.data(), send_displs.data(),
                         MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }

  std::vector<uint64_t> all_gather(uint64_t value) override {
    Watched watched(*watchdog_);
    std::vector<uint64_t> out(static_cast<size_t>(size_));
    check(MPI_Allgather(&value, 1, MPI_UINT64_T, out.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
    return out;
  }

  Verdict agree(int code, const std::string& message) override {
    Watched watched(*watchdog_);
    std::vector<int> codes(static_cast<size_t>(size_));
    check(MPI_Allgather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, MPI_COMM_WORLD), "MPI_Allgather");
    Verdict verdict;
    for (int r = 0; r < size_ && verdict.code == 0; ++r)
      if (codes[size_t(r)] != 0) verdict = {codes[size_t(r)], r, ""};
    if (verdict.code == 0) return verdict;
    // The failing rank's message, to every rank (length first).
    int64_t length = verdict.rank == rank_ ? int64_t(std::min<size_t>(message.size(), 4096)) : 0;
    check(MPI_Bcast(&length, 1, MPI_INT64_T, verdict.rank, MPI_COMM_WORLD), "MPI_Bcast");
    verdict.message = verdict.rank == rank_ ? message.substr(0, size_t(length)) : std::string(size_t(length), '\0');
    check(MPI_Bcast(verdict.message.data(), int(length), MPI_CHAR, verdict.rank, MPI_COMM_WORLD), "MPI_Bcast");
    return verdict;
  }

  void abort_all(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }

  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, size_t(length));
    const size_t comma = text.find(',');
    return fmt::format("MPI, {} ranks ({})", size_, text.substr(0, comma));
  }

 private:
  struct Watched {
    explicit Watched(Watchdog& dog) : dog(dog) { dog.enter(); }
    ~Watched() { dog.leave(); }
    Watchdog& dog;
  };
  int rank_ = 0, size_ = 1;
  std::vector<double> received_;
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace

Communicator& world() {
  static std::unique_ptr<Communicator> instance = []() -> std::unique_ptr<Communicator> {
    if (launcher_world_size() > 1) return std::make_unique<MpiCommunicator>();
    return std::make_unique<SingleProcess>();
  }();
  return *instance;
}

#else

bool built_with_mpi() { return false; }

Communicator& world() {
  const int size = launcher_world_size();
  if (size > 1) {
    throw InputError(
        fmt::format("launched as one of {} processes, but this normlab was built without MPI and "
                    "cannot run data-parallel (install libopenmpi-dev and rebuild, docs/scaling.md)",
                    size));
  }
  static SingleProcess instance;
  return instance;
}

#endif

}  // namespace normlab::dist
