#pragma once
// Helpers shared by the test files: a temporary directory that cleans up after itself, reading a
// whole file, running the real `normlab` binary as a child process, and the relative error the
// kernel tests compare with.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace normlab::test {

// A run config that trains two steps of a one-layer model in well under a second.
inline constexpr const char* kTwoStepRun = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16},
  "optim": {"lr": 0.01, "warmup_steps": 1},
  "train": {"steps": 2, "batch_size": 4, "eval_every": 0, "threads": 1}
})";

// max |ours - ref| / max(floor, max |ref|): one error for a whole tensor, relative to its largest
// element, so that elements near zero do not blow it up. floor 1 makes it absolute for small
// tensors. Sizes that differ give NaN, which fails every comparison (< and > alike).
template <typename A, typename B>
double relative_max_error(const std::vector<A>& ours, const std::vector<B>& ref, double floor = 1.0) {
  if (ours.size() != ref.size()) return std::nan("");
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ours.size(); i++) {
    max_diff = std::max(max_diff, std::fabs(double(ours[i]) - double(ref[i])));
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  return max_diff / std::max(max_ref, floor);
}

// A fresh directory under the system temp dir, removed with everything in it at the end of scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "normlab_test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string sub(const std::string& name) const { return (path / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return sub(name);
  }
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// run_normlab: `normlab ARGS` through the shell (ARGS as one command-line string, quoted by the caller), its
// stdout and stderr kept in files of `dir` and returned with the exit code (-1: killed by a signal).
struct Cli {
  int code = -1;
  std::string out, err;
};
inline Cli run_normlab(const TempDir& dir, const std::string& args) {
  const std::string out = dir.sub("stdout.txt"), err = dir.sub("stderr.txt");
  const std::string command = std::string("\"") + NORMLAB_BINARY + "\" " + args + " >\"" + out + "\" 2>\"" + err + "\"";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

// `normlab ARGS...` started with fork + execve, stdout and stderr appended to files, with this
// process's environment plus `env` ("NAME=VALUE" entries, e.g. PausePoint::env()). `before_exec`
// runs in the child between fork and exec (set a resource limit, drop privileges); it must only
// make async-signal-safe calls.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& stdout_path, const std::string& stderr_path,
        const std::function<void()>& before_exec = {}, std::vector<std::string> env = {}) {
    std::vector<std::string> all{NORMLAB_BINARY};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (out >= 0) ::dup2(out, STDOUT_FILENO);
      if (err >= 0) ::dup2(err, STDERR_FILENO);
      if (before_exec) before_exec();
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  void signal(int signal_number) const { ::kill(pid_, signal_number); }

  // The exit code, 128 + the signal for a killed child, or -1 if it was still running after
  // `timeout` (it is then killed).
  int wait(std::chrono::seconds timeout = std::chrono::seconds(120)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (true) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0) return -1;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        reaped_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// The test's side of NORMLAB_TEST_PAUSE_AT (normlab/io/test_pause.hpp): a process started with
// env() holds at `point` and announces it with DIR/PID.paused; the test waits for that event, acts
// (a signal, a kill, a file changed), then lets the process go on with resume(). Nothing depends on
// how fast the machine is: the process is where the test wants it for as long as the test needs.
class PausePoint {
 public:
  // point: "data", "step N" or "eval"; the announcements go to a fresh folder under `dir`.
  PausePoint(const TempDir& dir, const std::string& point)
      : folder_(dir.sub("pause_" + std::to_string(counter()++))), point_(point) {
    std::filesystem::create_directories(folder_);
  }
  std::string env() const { return "NORMLAB_TEST_PAUSE_AT=" + point_ + ":" + folder_; }

  // The pids that have announced the pause, in no particular order.
  std::vector<pid_t> paused() const {
    std::vector<pid_t> pids;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder_, ec))
      if (entry.path().extension() == ".paused") pids.push_back(pid_t(std::stol(entry.path().stem().string())));
    return pids;
  }
  // Waits until `count` processes have announced the pause (a generous bound: a broken hook fails
  // the test instead of hanging it); returns their pids, empty if they never all did.
  std::vector<pid_t> wait(size_t count, std::chrono::seconds timeout = std::chrono::seconds(300)) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::vector<pid_t> pids = paused();
      if (pids.size() >= count) return pids;
      if (std::chrono::steady_clock::now() > deadline) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  void resume(pid_t pid) const { std::ofstream(folder_ + "/" + std::to_string(pid) + ".resume"); }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string folder_, point_;
};

// Waits until the process `pid` (not necessarily a child of this one) has ended: poll(2) on a
// pidfd, which becomes readable when it exits. False if it still runs after `timeout`.
inline bool wait_until_gone(pid_t pid, std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const int fd = int(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already gone (and reaped)
  pollfd p{fd, POLLIN, 0};
  const int ready = ::poll(&p, 1, int(timeout.count() * 1000));
  ::close(fd);
  return ready == 1;
}

// Runs `normlab ARGS...` to completion; returns its exit code (see Child::wait).
inline int run_normlab(const std::vector<std::string>& args, const std::string& stdout_path,
                       const std::string& stderr_path) {
  Child child(args, stdout_path, stderr_path);
  return child.wait();
}

}  // namespace normlab::test
