#pragma once
// One owner per output directory (a run directory, a compare output directory). Two processes
// writing one directory mix their files (one run's config.json, the other's checkpoint, a
// metrics.jsonl with both runs' lines), so whoever holds the lock owns the directory and everyone
// else is refused at once.
//
// The lock is flock(2) on DIR/.normlab.lock, which the kernel releases when the holder's last
// descriptor closes: on a clean exit, a crash or kill -9 alike. A killed run therefore never leaves
// a stale lock and stays resumable. The file holds the holder's pid (written after locking) so the
// refusal can name it; the file itself is left in place (removing it would race with a new owner).
// The descriptor is close-on-exec: child processes (compare's runs) do not inherit the lock.
#include <string>
#include <string_view>

namespace normlab::io {

inline constexpr const char* kDirLockFile = ".normlab.lock";

class DirLock {
 public:
  // Locks `dir` (which must exist). If another process holds it: InputError "<dir>: in use by
  // another normlab process (pid N) ...". `what` names the directory in that message ("run
  // directory", "compare output directory").
  static DirLock acquire(const std::string& dir, std::string_view what = "directory");
  // The same lock on the file `lock_path` (its folder must exist), for something that is not one
  // directory: compare locks each run of its grid in OUT/.locks/NAME.lock, since the run's own
  // directory lock belongs to the `normlab train` that trains it. `dir` and `what` name it in the
  // refusal.
  static DirLock acquire_file(const std::string& lock_path, const std::string& dir, std::string_view what);

  DirLock() = default;
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  bool held() const { return fd_ >= 0; }
  const std::string& dir() const { return dir_; }
  void release();

 private:
  int fd_ = -1;
  std::string dir_;
};

}  // namespace normlab::io
