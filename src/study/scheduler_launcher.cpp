// How compare starts its runs (scheduler_parts.hpp: RunLauncher). Each run is `normlab train ...`
// in a process of its own, a child of compare, in its own process group, tied to compare's life,
// its output in its log. Two ways to get there:
//   exec      fork compare and exec the normlab binary: the dynamic loader, the shared libraries'
//             initialisers (OpenSSL's, OpenMPI's) and the static constructors, about 4 ms a run
//   launcher  a process forked from compare before it read anything (small, one thread) forks
//             each run, which calls the command line's entry in place: no exec, no loading, and
//             exit with _exit (no library destructors)
// The launcher's fork is a grandchild of compare: its middle process exits at once, and compare, a
// child subreaper, adopts the run, so compare waits for it, reads its CPU time and signals it as
// it would an exec'ed one. A launcher that dies or fails leaves compare on exec.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "normlab/error.hpp"
#include "normlab/train/run_clock.hpp"
#include "scheduler_parts.hpp"

namespace normlab::study::scheduler_parts {

namespace {

// One request to the launcher: the log's path, then the arguments, each ending in NUL.
constexpr size_t kMaxRequestBytes = 64 * 1024;

int pidfd_open(pid_t pid) { return int(::syscall(SYS_pidfd_open, pid, 0)); }

// The process's threads (/proc/self/stat field 20); 0 when unknown.
long thread_count() {
  std::ifstream in("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close_paren + 2));
  std::string field;
  for (int i = 3; i <= 20 && fields >> field; ++i)
    if (i == 20) return std::strtol(field.c_str(), nullptr, 10);
  return 0;
}

// What exec does to signal handlers (handled signals back to their default; ignored ones stay
// ignored), so that the run starts as an exec'ed `normlab train` would.
void reset_signal_handlers() {
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0) continue;
    if (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number, &action, nullptr);
  }
}

// The run's own process group (a Ctrl-C at the terminal reaches compare only, which then sends each
// run one SIGTERM; a run that got both would take the second as "stop at once"), its output in the
// log (O_NOFOLLOW, O_NONBLOCK: a FIFO or link fails), stdin from /dev/null.
void redirect_for_run(const std::string& log_path) {
  setpgid(0, 0);
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) {
    dup2(devnull, STDIN_FILENO);
    ::close(devnull);
  }
}

// The run ends with compare, even when compare is killed (kill -9): the kernel sends it SIGTERM
// when compare dies, so it finishes its step, writes a checkpoint and exits, and a rerun resumes
// it. If compare died before the prctl the signal never comes: leave now.
void tie_to(pid_t compare) {
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != compare) _exit(128 + SIGTERM);
}

// A run in the launcher's grandchild, once compare has adopted it: the command line's entry on the
// arguments, then _exit with its code (compare's static objects are not this process's to destroy).
[[noreturn]] void become_run(pid_t compare, const std::vector<std::string>& args, const std::string& log_path,
                             const TrainEntry& entry) {
  tie_to(compare);
  redirect_for_run(log_path);
  ::close_range(3, ~0U, 0);  // compare's descriptors (locks among them) are not the run's to hold
  reset_signal_handlers();
  train::restart_process_clock();
  int code = 1;
  try {
    code = entry(args);
  } catch (...) {
    std::fputs("normlab: internal error: the run's entry threw\n", stderr);
  }
  std::fflush(nullptr);
  _exit(code);
}

// The launcher's loop: a request in, a run out (its pid back, or -errno), until compare closes its
// end (or dies: PR_SET_PDEATHSIG).
[[noreturn]] void launcher_loop(int socket, pid_t compare, const TrainEntry& entry) {
  std::vector<char> buffer(kMaxRequestBytes);
  for (;;) {
    const ssize_t n = ::recv(socket, buffer.data(), buffer.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);
    std::vector<std::string> strings;
    for (size_t begin = 0; begin < size_t(n);) {
      const size_t end = size_t(std::find(buffer.begin() + long(begin), buffer.begin() + n, '\0') - buffer.begin());
      strings.emplace_back(buffer.data() + begin, end - begin);
      begin = end + 1;
    }
    if (strings.empty()) _exit(1);
    const std::string log_path = strings.front();
    const std::vector<std::string> args(strings.begin() + 1, strings.end());
    // ready: the run has a pidfd of the middle process, which may exit only then (its pid cannot
    // be reaped and reused while the run looks at it).
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) {
      const int reply = -errno;
      [[maybe_unused]] const ssize_t sent = ::send(socket, &reply, sizeof reply, MSG_NOSIGNAL);
      continue;
    }
    const pid_t middle = fork();
    if (middle == 0) {
      const pid_t self = getpid();
      const pid_t run = fork();
      if (run == 0) {
        ::close(ready[0]);
        ::close(socket);
        const int parent = pidfd_open(self);
        [[maybe_unused]] const ssize_t written = ::write(ready[1], "r", 1);
        ::close(ready[1]);
        // Readable once the middle process has exited, and then compare (the subreaper) is this
        // process's parent.
        if (parent >= 0) {
          pollfd fd{parent, POLLIN, 0};
          while (::poll(&fd, 1, -1) < 0 && errno == EINTR) {
          }
          ::close(parent);
        }
        become_run(compare, args, log_path, entry);
      }
      const int reply = run > 0 ? int(run) : -errno;
      ::close(ready[1]);
      if (run > 0) {
        char byte = 0;
        while (::read(ready[0], &byte, 1) < 0 && errno == EINTR) {
        }
      }
      [[maybe_unused]] const ssize_t sent = ::send(socket, &reply, sizeof reply, MSG_NOSIGNAL);
      _exit(0);
    }
    const int fork_error = errno;
    ::close(ready[0]);
    ::close(ready[1]);
    if (middle < 0) {
      const int reply = -fork_error;
      [[maybe_unused]] const ssize_t sent = ::send(socket, &reply, sizeof reply, MSG_NOSIGNAL);
      continue;
    }
    while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace

RunLauncher::RunLauncher(std::string exe, TrainEntry entry) : exe_(std::move(exe)), entry_(std::move(entry)) {
  if (!entry_) return;
  // A fork of a process with other threads holds whatever locks they held: exec then.
  if (thread_count() != 1) return;
  const int self_fd = pidfd_open(getpid());  // kernels before 5.3 have no pidfds: exec then
  if (self_fd < 0) return;
  ::close(self_fd);
  int sockets[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sockets) != 0) return;
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    ::close(sockets[0]);
    ::close(sockets[1]);
    return;
  }
  const pid_t compare = getpid();
  std::fflush(nullptr);  // nothing buffered is written twice
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(sockets[0]);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != compare) _exit(0);
    // Only the socket and the standard streams: compare's other descriptors stay compare's.
    if (sockets[1] != 3) {
      dup2(sockets[1], 3);
      ::close(sockets[1]);
    }
    ::close_range(4, ~0U, 0);
    launcher_loop(3, compare, entry_);
  }
  ::close(sockets[1]);
  if (pid < 0) {
    ::close(sockets[0]);
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    return;
  }
  launcher_pid_ = pid;
  socket_ = sockets[0];
}

RunLauncher::~RunLauncher() {
  if (socket_ >= 0) ::close(socket_);  // the launcher reads its end and exits
  if (launcher_pid_ > 0) {
    while (::waitpid(launcher_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (launcher_pid_ > 0) prctl(PR_SET_CHILD_SUBREAPER, 0);
}

pid_t RunLauncher::launch(const std::vector<std::string>& args, const std::string& log_path) {
  if (socket_ >= 0) {
    std::string request = log_path + '\0';
    for (const std::string& a : args) request += a + '\0';
    int reply = 0;
    if (request.size() <= kMaxRequestBytes &&
        ::send(socket_, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size())) {
      ssize_t got;
      while ((got = ::recv(socket_, &reply, sizeof reply, 0)) < 0 && errno == EINTR) {
      }
      if (got == ssize_t(sizeof reply) && reply > 0) return pid_t(reply);
    }
    // The launcher is gone or cannot fork: exec from here on.
    ::close(socket_);
    socket_ = -1;
  }
  return exec_run(args, log_path);
}

pid_t RunLauncher::exec_run(const std::vector<std::string>& args, const std::string& log_path) const {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe_.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t compare = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw InputError(fmt::format("compare: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    tie_to(compare);  // kept across exec
    redirect_for_run(log_path);
    execv(exe_.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace normlab::study::scheduler_parts
