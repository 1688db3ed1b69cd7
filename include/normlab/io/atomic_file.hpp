#pragma once
// Whole-file reads and crash-safe whole-file writes. A checkpoint or summary is either the old file
// or the new one, never a torn mix: the bytes go to a temporary file in the same directory, are
// fsync'ed, and the temporary is renamed over the target (rename is atomic within one filesystem).
#include <cstddef>
#include <cstdint>
#include <sys/types.h>

#include <istream>
#include <memory>
#include <utility>

#include <string>
#include <string_view>
#include <vector>

namespace normlab::io {

// Writes `size` bytes to `path` atomically: temp file "<path>.tmp.<pid>.<n>" in the same directory,
// fsync, rename over `path`, fsync the directory. On any failure the temp file is removed, whatever
// was at `path` before is left untouched, and InputError("<path>: cannot write: <reason>") is thrown.
void write_file_atomic(const std::string& path, const void* data, size_t size);
void write_file_atomic(const std::string& path, std::string_view contents);

// Several files of one directory, each written as write_file_atomic does (temporary, fsync,
// rename), committed together (commit_together): every file's data synced before the first
// rename, one fsync of their directory after the last: the same guarantee once it returns (every
// file whole and durable: old or new after a kill or a power cut) at two journal commits instead of
// two per file. A failure throws as write_file_atomic does, naming the file; a failed sync leaves
// every file untouched, a failed rename the files before it renamed in place, that file and the
// ones after it untouched.
struct NamedText {
  std::string path;
  std::string_view contents;
};
void write_files_atomic(const std::vector<NamedText>& files);

// The same for a file written in pieces (a stream of predictions): the pieces go to the temporary;
// commit() fsyncs it, renames it over `path` and fsyncs the directory. Destroyed without a commit
// (an error, a refusal midway), the temporary is removed and whatever was at `path` is untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync, rename over the path and, unless sync_directory is false (write_files_atomic syncs
  // once for several files), fsync the directory.
  void commit(bool sync_directory = true);
  // commit() in steps, for commit_together: start writing the data out (returns at once); fsync
  // and close; rename over the path. Each failure removes the temporary and throws.
  void start_sync();
  void finish_sync();
  void publish();
  const std::string& path() const { return path_; }

 private:
  void abandon();
  std::string path_, temp_path_;  // temp_path_ empty once published or abandoned
  int fd_ = -1;
};

// Commits writers of one directory together (write_files_atomic): each one's data synced, then
// each renamed in order, then one directory sync. Throws as write_files_atomic does.
void commit_together(const std::vector<AtomicFileWriter*>& files);

// Writes all `size` bytes to `fd`, retrying partial and interrupted writes; 0, or the errno of the
// failure.
int write_all(int fd, const void* data, size_t size);

// A process killed between creating and renaming the temp file leaves "<path>.tmp.<pid>.<n>"
// behind: never read, but as large as the file. Removes every such temporary of `path`. Only for
// a file with one writer at a time (a run directory), where any of them is stale.
void remove_stale_temp_files(const std::string& path);

// A regular file open for reading, its descriptor closed with it; `size` is its size when opened.
class ReadableFile {
 public:
  ReadableFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  ReadableFile(ReadableFile&& other) noexcept : fd_(other.fd_), size_(other.size_) { other.fd_ = -1; }
  ReadableFile& operator=(ReadableFile&&) = delete;
  ~ReadableFile();
  int fd() const { return fd_; }
  // The descriptor, now the caller's to close.
  int release() { return std::exchange(fd_, -1); }
  uint64_t size() const { return size_; }
  // Reads exactly `n` bytes into `data`, retrying short and interrupted reads; false if the file
  // ended first or a read failed.
  bool read(void* data, size_t n);

 private:
  int fd_;
  uint64_t size_;
};

// The one way normlab opens a file a user names for reading. InputError "<path>: cannot open:
// <reason>" when it is missing or unreadable, "<path>: not a regular file (a FIFO)" for a FIFO,
// a device (/dev/zero), a socket or a directory. The type is checked on the opened descriptor, and
// the open itself never waits (O_NONBLOCK, cleared afterwards): a FIFO without a writer, or a path
// swapped for one after an earlier check, cannot hang the reader.
// `failure` starts the message of a file that cannot be opened ("cannot open", "cannot read").
ReadableFile open_regular_file(const std::string& path, const char* failure = "cannot open");

// The same file as a std::istream (for line-by-line readers), reading the descriptor that was checked.
std::unique_ptr<std::istream> open_regular_stream(const std::string& path, const char* failure = "cannot open");

// What a file of this st_mode is, for "not a regular file (...)": "a directory", "a FIFO"...
const char* file_kind(mode_t mode);

// Reads a whole regular file. Throws InputError("<path>: ...") if it is missing, not a regular file,
// unreadable, or larger than `max_bytes` (checked before anything is allocated).
std::string read_file(const std::string& path, size_t max_bytes);

// Reads `fd` (a pipe, standard input) to its end in chunks, holding at most `max_bytes`: InputError
// "<name>: more than <max_bytes> bytes, larger than the limit of <max_bytes> bytes" as soon as it
// passes the limit, without reading the rest.
std::string read_stream(int fd, size_t max_bytes, const std::string& name);

}  // namespace normlab::io
