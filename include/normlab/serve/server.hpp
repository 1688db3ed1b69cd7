#pragma once
// `normlab serve`'s HTTP side, on cpp-httplib: GET / is the live report page, /runs.csv and
// /curves.csv the live tables, any other path a file inside DIR. Read-only: GET and HEAD only.
// docs/serve.md states the security model this file implements; src/serve/server_parts.hpp lists
// the files that implement it, one job each.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "normlab/serve/live.hpp"

namespace normlab::serve {

// A request path opened under the directory `root_fd` names, or the status that refuses it:
// 400 for a NUL byte; 403 for a ".." segment, a link leading outside DIR, a file the server may not
// read, or a kernel without openat2(2); 404 for a name that does not exist, a "." segment, a hidden
// name (a segment starting with '.', also when percent-encoded: the path arrives decoded), or
// anything that is not a regular file. The file is opened with RESOLVE_BENEATH: the kernel refuses
// every step out of DIR while it opens, so no check-then-open window exists.
struct OpenedFile {
  int status = 404;  // 200: `fd` is open on a regular file
  int fd = -1;       // owned
  OpenedFile() = default;
  OpenedFile(int status_code, int descriptor) : status(status_code), fd(descriptor) {}
  OpenedFile(OpenedFile&& other) noexcept : status(other.status), fd(other.fd) { other.fd = -1; }
  OpenedFile& operator=(OpenedFile&&) = delete;
  ~OpenedFile();
};
OpenedFile open_request_path(int root_fd, const std::string& request_path);

// Whether a request's Host header names this server: "localhost" or the bound address, with any
// port or none (a tunnel may forward another port); after a wildcard bind (0.0.0.0, ::), any IP
// literal. A DNS name an attacker controls (DNS rebinding) never matches.
bool host_allowed(const std::string& host_header, const std::string& bound_address);

// How much of the machine clients may hold. A connection first waits, without a thread, until its
// whole request (headers and any body) has arrived; only then does it get a thread of its own to be
// answered on. Past either cap the connection is answered 503 at once, never queued.
struct ServerLimits {
  size_t max_connections = 512;  // requests being answered at once (one thread each)
  size_t max_waiting = 4096;     // connections still sending their request (no thread; also capped by the fd limit)
  // From connecting to a complete request: a client idle, half-sent or trickling a byte at a time
  // is answered 408 and closed at this deadline.
  std::chrono::milliseconds request_deadline{5000};
  int write_timeout_s = 5;  // a client that reads nothing of its answer this long is dropped
};

class Server {
 public:
  explicit Server(LiveReport& live, ServerLimits limits = {});
  ~Server();
  // Binds `address` (an IP literal) and `port` (0: any free port) exclusively (no SO_REUSEPORT:
  // a second server cannot share the port); returns the port bound. InputError when it cannot
  // (the port is taken, the address is not this machine's).
  int bind(const std::string& address, int port);
  void run();              // serves until stop()
  void stop();             // from any thread
  bool running() const;    // run() is accepting connections (tests wait for it before stop())
  size_t waiting() const;  // connections still sending their request
  size_t busy() const;     // requests being answered

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab::serve
