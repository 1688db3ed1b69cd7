// What DIR holds on disk, read without taking a lock or writing anything: which directories are
// runs, whose trainer holds its lock (from /proc/locks), the stamps that tell a file changed, and
// the files the report must not read whole.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "live_parts.hpp"
#include "normlab/io/dir_lock.hpp"
#include "normlab/serve/live.hpp"
#include "normlab/study/run_dirs.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

std::string cannot_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return errno == ENOENT ? "" : fmt::format("{}: cannot read: {}", path, std::strerror(errno));
  struct stat st {};
  int error = 0;
  // A directory must be searchable too: looking up any name in it tells (EACCES when it is not).
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && ::fstatat(fd, "config.json", &st, 0) != 0 && errno != ENOENT)
    error = errno;
  ::close(fd);
  return error != 0 ? fmt::format("{}: cannot read: {}", path, std::strerror(error)) : "";
}

namespace live_parts {

namespace {

// A run directory holds one of these; a directory that cannot be searched might, and is listed so
// that its row can say why it cannot be read.
bool is_run_dir(const fs::path& dir) {
  for (const char* file : {"config.json", "metrics.jsonl", "checkpoint.safetensors", io::kDirLockFile}) {
    std::error_code ec;
    if (fs::exists(dir / file, ec) || ec) return true;
  }
  return false;
}

// True if `path` (after links) is inside `root` (canonical).
bool inside(const fs::path& root, const fs::path& path) {
  std::error_code ec;
  const fs::path real = fs::canonical(path, ec);
  if (ec) return false;
  const fs::path rel = real.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

// The subdirectories of `parent` that are run directories and do not lead outside `root`.
std::vector<std::string> run_subdirs(const fs::path& root, const fs::path& parent) {
  return study::run_subdirectories(parent.string(),
                                   [&](const std::string& sub) { return inside(root, sub) && is_run_dir(sub); });
}

}  // namespace

DirKind kind_of(const std::string& dir) {
  if (study::is_compare_dir(dir)) return DirKind::compare;
  return is_run_dir(dir) ? DirKind::run : DirKind::folder;
}

Layout scan(const std::string& dir) {
  const fs::path root = fs::canonical(dir);
  Layout layout;
  switch (kind_of(dir)) {
    case DirKind::run: layout.run_dirs = {dir}; break;
    case DirKind::folder: layout.run_dirs = run_subdirs(root, dir); break;
    case DirKind::compare: {
      layout.compare = true;
      layout.run_dirs = run_subdirs(root, fs::path(dir) / "runs");
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(fs::path(dir) / "configs", ec))
        if (entry.path().extension() == ".json") layout.planned.push_back(entry.path().stem().string());
      std::sort(layout.planned.begin(), layout.planned.end());
      break;
    }
  }
  return layout;
}

// From /proc/locks: whether a trainer holds its run's lock, learnt without touching the lock.
FlockSet held_flocks() {
  FlockSet held;
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    if (line.find("FLOCK") == std::string::npos || line.find("->") != std::string::npos) continue;
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      unsigned major_id = 0, minor_id = 0;
      unsigned long long inode = 0;
      if (std::count(word.begin(), word.end(), ':') == 2 &&
          std::sscanf(word.c_str(), "%x:%x:%llu", &major_id, &minor_id, &inode) == 3)
        held.insert({major_id, minor_id, uint64_t(inode)});
    }
  }
  return held;
}

bool lock_held(const fs::path& run_dir, const FlockSet& held) {
  struct stat st {};
  if (::stat((run_dir / io::kDirLockFile).c_str(), &st) != 0) return false;
  return held.count({major(st.st_dev), minor(st.st_dev), uint64_t(st.st_ino)}) > 0;
}

// The size, the mtime and the mode (a chmod makes a file unreadable): what the fingerprint compares.
std::string file_stamp(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "-";
  return fmt::format("{}:{}.{}:{:o}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_mode);
}

double mtime_s(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NAN;
  return double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec);
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// The directory itself, or a file of it that exists but does not open.
std::string unreadable_run(const fs::path& run_dir) {
  if (std::string why = cannot_read(run_dir.string()); !why.empty()) return why;
  for (const char* file : {"config.json", "metrics.jsonl", "summary.json"})
    if (std::string why = cannot_read((run_dir / file).string()); !why.empty()) return why;
  return "";
}

// The report would hold such a line in memory whole; no record is that long. Scans for newlines
// only (memchr: a gigabyte in well under a second), holding 1 MiB.
std::string long_line(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";
  std::vector<char> buffer(1 << 20);
  uint64_t run = 0;  // bytes since the last newline
  int64_t line = 1;
  std::string problem;
  for (ssize_t n; problem.empty() && (n = ::read(fd, buffer.data(), buffer.size())) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (const char *at = buffer.data(), *end = at + n; at < end;) {
      const char* newline = static_cast<const char*>(std::memchr(at, '\n', size_t(end - at)));
      run += uint64_t((newline ? newline : end) - at);
      if (run > kMaxLineBytes) {
        problem = fmt::format("{}: line {}: longer than {} MiB: not a metrics record", path, line, kMaxLineBytes >> 20);
        break;
      }
      if (!newline) break;
      run = 0, ++line, at = newline + 1;
    }
  }
  ::close(fd);
  return problem;
}

std::string runs_fingerprint(const std::vector<std::string>& run_dirs, const FlockSet& held) {
  std::string fingerprint;
  for (const std::string& d : run_dirs) {
    fingerprint += d + "|" + (lock_held(d, held) ? "L" : "-") + "|" + file_stamp(d);
    for (const char* file : {"config.json", "metrics.jsonl", "summary.json"})
      fingerprint.append("|").append(file_stamp(fs::path(d) / file));
    fingerprint += "\n";
  }
  return fingerprint;
}

}  // namespace live_parts
}  // namespace normlab::serve
