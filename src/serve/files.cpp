// Any path that is not one of the page's: a file beneath DIR. The path is checked on its own
// (no "..", no hidden names), then opened by the kernel with RESOLVE_BENEATH, so that no link or
// race leads out of DIR; the file is streamed from that descriptor, one range at most.
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <sstream>

#include "server_parts.hpp"

namespace normlab::serve {

namespace {

constexpr off_t kMaxFileBytes = 64 << 20;  // larger files (checkpoints) are not served

std::string content_type(const std::string& file) {
  static const std::map<std::string, std::string> types = {{".html", "text/html; charset=utf-8"},
                                                           {".svg", "image/svg+xml"},
                                                           {".png", "image/png"},
                                                           {".csv", "text/csv; charset=utf-8"},
                                                           {".json", "application/json"},
                                                           {".jsonl", "text/plain; charset=utf-8"},
                                                           {".md", "text/plain; charset=utf-8"},
                                                           {".log", "text/plain; charset=utf-8"}};
  const auto it = types.find(std::filesystem::path(file).extension().string());
  return it == types.end() ? "application/octet-stream" : it->second;
}

// The refusal of a request path on its own, before anything is opened: 200 when the path may be
// looked up, else the status. `relative` receives the path without its leading slashes.
int check_segments(const std::string& request_path, std::string& relative) {
  if (request_path.find('\0') != std::string::npos) return 400;
  std::istringstream segments(request_path);
  std::string segment;
  while (std::getline(segments, segment, '/')) {
    if (segment.empty()) continue;
    // "..": 403 even when it would stay inside; ".", and hidden names (.normlab.lock, .locks/): 404.
    if (segment[0] == '.') return segment == ".." ? 403 : 404;
    relative += (relative.empty() ? "" : "/") + segment;
  }
  return relative.empty() ? 404 : 200;
}

// One range (screen() refused more) clamped to a file of `size` bytes (RFC 9110 14.1.2: a last
// position past the end means the end; a suffix longer than the file, the whole file), written back
// as the single [first, last] cpp-httplib sends. One that starts past the end is 416, "bytes */size":
// false, and `res` says so.
bool clamp_range(const httplib::Request& req, httplib::Response& res, size_t size) {
  if (req.ranges.empty()) return true;
  auto& ranges = const_cast<httplib::Request&>(req).ranges;
  const auto [first, last] = ranges[0];
  const int64_t n = int64_t(size);
  int64_t from = first, to = last;
  if (first < 0) from = last <= 0 ? n : n - std::min<int64_t>(last, n), to = n - 1;
  else if (last < 0 || last >= n) to = n - 1;
  if (from >= n || to < from) {
    ranges.clear();
    res.status = 416;
    res.set_header("Content-Range", fmt::format("bytes */{}", size));
    return false;
  }
  ranges[0] = {from, to};
  return true;
}

}  // namespace

OpenedFile::~OpenedFile() {
  if (fd >= 0) ::close(fd);
}

OpenedFile open_request_path(int root_fd, const std::string& request_path) {
  std::string relative;
  if (const int refused = check_segments(request_path, relative); refused != 200) return {refused, -1};
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, not served).
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = -1;
  do fd = ::syscall(SYS_openat2, root_fd, relative.c_str(), &how, sizeof how);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    // EXDEV: a ".." or a link leading out of DIR (an absolute link too); ENOSYS: no openat2 here,
    // and no other way to open without a check-then-open window, so nothing is served.
    const int error = errno;
    return {error == ENOENT || error == ENOTDIR || error == ELOOP ? 404 : 403, -1};
  }
  OpenedFile opened{200, int(fd)};
  struct stat st {};
  if (::fstat(opened.fd, &st) != 0 || !S_ISREG(st.st_mode)) opened.status = 404;
  return opened;
}

void internal::serve_file(int root_fd, const httplib::Request& req, httplib::Response& res) {
  const OpenedFile opened = open_request_path(root_fd, req.path);
  struct stat st {};
  if (opened.status == 200 && (::fstat(opened.fd, &st) != 0 || st.st_size > kMaxFileBytes)) {
    res.status = 403;
    res.set_content("normlab serve: files over 64 MiB are not served\n", "text/plain; charset=utf-8");
    return;
  }
  if (opened.status != 200) {
    res.status = opened.status;
    res.set_content(opened.status == 403 ? "normlab serve: outside the served directory, or not readable\n"
                                         : "normlab serve: no such file\n",
                    "text/plain; charset=utf-8");
    return;
  }
  const size_t size = size_t(st.st_size);
  if (!clamp_range(req, res, size)) return;
  res.set_header("Cache-Control", "no-cache");
  if (size == 0) return res.set_content("", content_type(req.path).c_str());
  // Streamed: 64 KiB read from the descriptor opened above per write to the client, so a reader
  // costs 64 KiB however large the file and however slowly it reads (no gzip: a provider with a
  // length is sent as it is).
  auto fd = std::make_shared<OpenedFile>(200, opened.fd);
  const_cast<OpenedFile&>(opened).fd = -1;
  res.set_content_provider(size, content_type(req.path), [fd](size_t offset, size_t length, httplib::DataSink& sink) {
    std::array<char, 1 << 16> buffer;
    ssize_t n;
    do n = ::pread(fd->fd, buffer.data(), std::min(length, buffer.size()), off_t(offset));
    while (n < 0 && errno == EINTR);
    // A file that shrank while sent: the promised length cannot be kept, so the connection ends.
    if (n <= 0) return false;
    return sink.write(buffer.data(), size_t(n));
  });
}

}  // namespace normlab::serve
