#include "normlab/io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <ext/stdio_filebuf.h>
#include <vector>

#include "normlab/error.hpp"

namespace normlab::io {

namespace {

[[noreturn]] void throw_write_error(const std::string& path, int err) {
  throw InputError(path + ": cannot write: " + std::strerror(err));
}

constexpr const char* kTempMarker = ".tmp.";  // "<path>.tmp.<pid>.<n>"

// Unique within this process too, so two threads saving the same path never share a temp file.
std::string temp_path_for(const std::string& path) {
  static std::atomic<unsigned long> counter{0};
  return path + kTempMarker + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

// The directory holding `path`, for the fsync that makes the rename itself durable.
std::string parent_directory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Without this a rename may not survive a power cut. Some filesystems cannot fsync a directory
// (EINVAL); the data itself is already on disk then, so that is not an error. Errors name `path`.
void sync_parent_directory(const std::string& path) {
  int dir_fd = ::open(parent_directory(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) throw_write_error(path, errno);
  if (::fsync(dir_fd) != 0 && errno != EINVAL) {
    const int err = errno;
    ::close(dir_fd);
    throw_write_error(path, err);
  }
  ::close(dir_fd);
}

}  // namespace

int write_all(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t written = ::write(fd, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes += written;
    size -= size_t(written);
  }
  return 0;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw InputError("(empty path): cannot write: empty file name");
  temp_path_ = temp_path_for(path_);
  // O_EXCL | O_NOFOLLOW: never write through a link or into a file someone else placed there.
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_write_error(path_, errno);
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) throw UsageError("AtomicFileWriter: write after commit");
  if (const int err = write_all(fd_, data, size); err != 0) {
    const std::string path = path_;
    abandon();
    throw_write_error(path, err);
  }
}

void AtomicFileWriter::start_sync() {
  // Only a hint: the writeback starts now (the blocks are allocated in the filesystem's current
  // transaction), and the fsync that must follow finds it done or under way.
  if (fd_ >= 0) ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
}

void AtomicFileWriter::finish_sync() {
  if (fd_ < 0) throw UsageError("AtomicFileWriter: commit twice");
  int err = ::fsync(fd_) != 0 ? errno : 0;
  // close() can report a deferred write error (NFS, quota), so its result counts too.
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err != 0) {
    abandon();
    throw_write_error(path_, err);
  }
}

void AtomicFileWriter::publish() {
  if (fd_ >= 0 || temp_path_.empty()) throw UsageError("AtomicFileWriter: publish before its sync, or twice");
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    abandon();
    throw_write_error(path_, err);
  }
  temp_path_.clear();
}

void AtomicFileWriter::commit(bool sync_directory) {
  finish_sync();
  publish();
  if (sync_directory) sync_parent_directory(path_);
}

void commit_together(const std::vector<AtomicFileWriter*>& files) {
  for (const AtomicFileWriter* file : files) {
    if (parent_directory(file->path()) != parent_directory(files.front()->path()))
      throw UsageError("commit_together: " + file->path() + " is not in the directory of " + files.front()->path());
  }
  // Every file's writeback first, so that the first fsync commits the filesystem's journal for
  // all of them and the others find their blocks written and recorded: two journal commits (the
  // data, the renames) instead of two per file.
  for (AtomicFileWriter* file : files) file->start_sync();
  for (AtomicFileWriter* file : files) file->finish_sync();
  for (AtomicFileWriter* file : files) file->publish();
  if (!files.empty()) sync_parent_directory(files.back()->path());
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  AtomicFileWriter writer(path);
  writer.write(data, size);
  writer.commit();
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, contents.data(), contents.size());
}

void write_files_atomic(const std::vector<NamedText>& files) {
  for (const NamedText& file : files) {
    if (parent_directory(file.path) != parent_directory(files.front().path))
      throw UsageError("write_files_atomic: " + file.path + " is not in the directory of " + files.front().path);
  }
  std::vector<std::unique_ptr<AtomicFileWriter>> writers;
  std::vector<AtomicFileWriter*> pointers;
  for (const NamedText& file : files) {
    writers.push_back(std::make_unique<AtomicFileWriter>(file.path));
    writers.back()->write(file.contents.data(), file.contents.size());
    pointers.push_back(writers.back().get());
  }
  commit_together(pointers);
}

void remove_stale_temp_files(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string prefix = target.filename().string() + kTempMarker;
  std::error_code ec;
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(parent_directory(path), ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0 && entry.is_regular_file(ec)) {
      stale.push_back(entry.path());
    }
  }
  for (const std::filesystem::path& temp : stale) std::filesystem::remove(temp, ec);
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool ReadableFile::read(void* data, size_t n) {
  auto* out = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t got = ::read(fd_, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= size_t(got);
  }
  return true;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

ReadableFile open_regular_file(const std::string& path, const char* failure) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": " + failure + ": " + std::strerror(errno));
  struct stat st {};
  const bool stated = ::fstat(fd, &st) == 0;
  ReadableFile file(fd, stated ? uint64_t(st.st_size) : 0);  // closes fd on every path from here
  if (!stated) throw InputError(path + ": " + failure + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": not a regular file (" + file_kind(st.st_mode) + ")");
  // Back to blocking reads: O_NONBLOCK was only for the open.
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    throw InputError(path + ": " + failure + ": " + std::strerror(errno));
  return file;
}

namespace {

// An istream over a descriptor it owns (libstdc++'s stdio_filebuf closes it).
class DescriptorStream : public std::istream {
 public:
  explicit DescriptorStream(int fd) : std::istream(nullptr), buffer_(fd, std::ios::in | std::ios::binary) {
    rdbuf(&buffer_);
  }

 private:
  __gnu_cxx::stdio_filebuf<char> buffer_;
};

}  // namespace

std::unique_ptr<std::istream> open_regular_stream(const std::string& path, const char* failure) {
  ReadableFile file = open_regular_file(path, failure);
  return std::make_unique<DescriptorStream>(file.release());
}

std::string read_file(const std::string& path, size_t max_bytes) {
  ReadableFile in = open_regular_file(path);
  const uint64_t file_size = in.size();
  if (file_size > max_bytes) {
    throw InputError(path + ": file is " + std::to_string(file_size) + " bytes, larger than the limit of " +
                     std::to_string(max_bytes) + " bytes");
  }
  std::string contents(size_t(file_size), '\0');
  if (file_size > 0 && !in.read(contents.data(), size_t(file_size))) {
    throw InputError(path + ": cannot read: file ended early or read failed");
  }
  return contents;
}

std::string read_stream(int fd, size_t max_bytes, const std::string& name) {
  std::string contents;
  std::vector<char> chunk(size_t{1} << 16);
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(name + ": cannot read: " + std::strerror(errno));
    if (got == 0) return contents;
    if (contents.size() + size_t(got) > max_bytes)
      throw InputError(name + ": more than " + std::to_string(max_bytes) + " bytes, larger than the limit of " +
                       std::to_string(max_bytes) + " bytes");
    contents.append(chunk.data(), size_t(got));
  }
}

}  // namespace normlab::io
