#pragma once
// Whole-file reads and crash-safe whole-file writes. A checkpoint or summary is either the old file
// or the new one, never a torn mix: the bytes go to a temporary file in the same directory, are
// fsync'ed, and the temporary is renamed over the target (rename is atomic within one filesystem).
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace normlab::io {

// Writes `size` bytes to `path` atomically: temp file "<path>.tmp.<pid>.<n>" in the same directory,
// fsync, rename over `path`, fsync the directory. On any failure the temp file is removed, whatever
// was at `path` before is left untouched, and InputError("<path>: cannot write: <reason>") is thrown.
void write_file_atomic(const std::string& path, const void* data, size_t size);
void write_file_atomic(const std::string& path, std::string_view contents);

// Writes all `size` bytes to `fd`, retrying partial and interrupted writes; 0, or the errno of the
// failure.
int write_all(int fd, const void* data, size_t size);

// A process killed between creating and renaming the temp file leaves "<path>.tmp.<pid>.<n>"
// behind: never read, but as large as the file. Removes every such temporary of `path`. Only for
// a file with one writer at a time (a run directory), where any of them is stale.
void remove_stale_temp_files(const std::string& path);

// `path` opened for binary reading at its start, with its size in bytes in `size`. InputError with
// the path when it does not exist, is not a regular file (a directory, a FIFO) or cannot be read.
std::ifstream open_regular_file(const std::string& path, uint64_t& size);

// Reads a whole regular file. Throws InputError("<path>: ...") if it is missing, not a regular file,
// unreadable, or larger than `max_bytes` (checked before anything is allocated).
std::string read_file(const std::string& path, size_t max_bytes);

}  // namespace normlab::io
