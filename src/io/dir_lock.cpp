#include "normlab/io/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "normlab/error.hpp"

namespace normlab::io {

namespace {

// The pid the holder wrote into the lock file, or "" if it has not written it yet.
std::string read_holder(int fd) {
  char buffer[32] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (n <= 0) return "";
  std::string text(buffer, size_t(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return "";
  return text;
}

}  // namespace

DirLock DirLock::acquire(const std::string& dir, std::string_view what) {
  return acquire_file((std::filesystem::path(dir) / kDirLockFile).string(), dir, what);
}

DirLock DirLock::acquire_file(const std::string& path, const std::string& dir, std::string_view what) {
  // O_NOFOLLOW: a link planted as the lock file must not make us truncate its target.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw InputError(fmt::format("{}: cannot lock the {} {}: {}", path, what, dir, std::strerror(err)));
  }
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      throw InputError(fmt::format("{}: cannot lock the {} {}: {}", path, what, dir, std::strerror(err)));
    }
    // The holder writes its pid right after locking; give it a moment if we came in between.
    std::string holder = read_holder(fd);
    for (int attempt = 0; attempt < 20 && holder.empty(); ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      holder = read_holder(fd);
    }
    ::close(fd);
    throw InputError(
        fmt::format("{}: the {} is in use by another normlab process (pid {}); wait for it to end or "
                    "stop it, or choose another directory",
                    dir, what, holder.empty() ? "unknown" : holder));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    throw InputError(fmt::format("{}: cannot lock the {} {}: {}", path, what, dir, std::strerror(err)));
  }
  DirLock lock;
  lock.fd_ = fd;
  lock.dir_ = dir;
  return lock;
}

DirLock::DirLock(DirLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)), dir_(std::move(other.dir_)) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    dir_ = std::move(other.dir_);
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the flock
  fd_ = -1;
}

}  // namespace normlab::io
