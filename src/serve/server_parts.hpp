#pragma once
// What the server's files share (Server, server.hpp, is their only user; not a public interface).
// A connection goes through them in this order:
//   server.cpp          binds, accepts, and holds the parts together (Server::Impl)
//   gate.cpp            holds each connection, without a thread, until its request is whole
//   request_checks.cpp  what the gate and the routes check of a request: its header, its Host
//   routes.cpp          what each path answers, with which headers (the page's CSP among them)
//   files.cpp           any other path: a file beneath DIR, opened by the kernel, streamed
// docs/serve.md states the security model these implement.
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "normlab/serve/server.hpp"

// Named (not anonymous): Server::Impl, declared in the public header, holds them.
namespace normlab::serve::internal {

// Every response but the page itself: nothing in it may run or load anything, and a file from DIR
// (an .html or .svg among them) renders in a sandbox with an opaque origin, never on the page's.
inline constexpr const char* kFileCsp = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:";

// ---- request_checks.cpp

inline constexpr size_t kMaxHeaderBytes = 16 << 10;  // request line and headers
inline constexpr size_t kMaxBodyBytes = 64 << 10;    // no route takes a body; a small one is read and ignored

// What the gate decides about a request whose start it has seen (peeked, not read).
struct Verdict {
  int status = 0;   // 0: not complete yet; 200: complete, hand it over; else: refuse with this status
  std::string why;  // the refusal's one line
};
// The request in `bytes` (what has arrived so far): complete, incomplete, or refused.
Verdict examine_request(std::string_view bytes);

// ---- gate.cpp

// Between accept(2) and a thread: every connection waits here, in one epoll loop and without a
// thread, until its whole request has arrived (peeked, not read: cpp-httplib reads it afterwards).
// A client that is idle, half-sent or trickles a byte at a time holds a descriptor until its
// deadline (408), never a thread; past `max_waiting` waiting connections, or `max_connections`
// requests being answered, a new one is answered 503 at once instead of queueing. A refused
// connection is closed gracefully: the answer, a FIN, and its remaining input read and dropped
// until the client closes or the deadline, so the client reads the answer instead of a reset.
class Gate {
 public:
  // `serve`: reads and answers a whole request on its socket, then closes it (on a thread of its own).
  Gate(ServerLimits limits, std::function<void(int)> serve);
  ~Gate();
  void start();
  void admit(int sock);  // on the accepting thread, once per connection: cheap, never blocks
  void stop();
  size_t waiting() const;
  size_t busy() const;

 private:
  struct Waiting {
    std::chrono::steady_clock::time_point deadline;
    bool closing = false;  // answered and shut for writing: its input is read and dropped
  };
  struct Worker {
    std::thread thread;
    int wake = -1;  // a dup of its socket: shutdown(2) on it ends the worker's blocking write at stop
  };
  void close_waiting(int sock);                               // under mutex_
  void refuse(int sock, int status, const std::string& why);  // under mutex_
  void linger(int sock);                                      // under mutex_
  void examine(int sock, std::vector<char>& peek);            // under mutex_
  void hand_over(int sock);                                   // under mutex_
  void poll_loop();

  const ServerLimits limits_;
  const std::function<void(int)> serve_;
  int epoll_fd_ = -1, wake_fd_ = -1;
  mutable std::mutex mutex_;
  bool stopping_ = false;
  std::map<int, Waiting> waiting_;  // by socket
  std::map<uint64_t, Worker> workers_;
  uint64_t next_worker_ = 0;
  std::vector<Worker> finished_;
  std::condition_variable worker_done_;
  std::thread poller_;
};

// The limits this process can keep, the descriptor limit raised to fit them.
ServerLimits fit_to_descriptors(ServerLimits limits);

// ---- files.cpp

// Answers a GET or HEAD of a file beneath the directory `root_fd` names: one range at most (the
// routes refused more), clamped to the file; streamed, never read whole.
void serve_file(int root_fd, const httplib::Request& req, httplib::Response& res);

// ---- server.cpp

// Accepts connections and hands each to the gate (no thread yet); binds and listens only.
class GateListener : public httplib::Server {
 public:
  Gate* gate = nullptr;

 private:
  bool process_and_close_socket(int sock) override {
    gate->admit(sock);
    return true;
  }
};

}  // namespace normlab::serve::internal

namespace normlab::serve {

struct Server::Impl {
  LiveReport& live;
  ServerLimits limits_set;
  int root_fd = -1;           // DIR, opened once: every file is opened beneath it
  std::string bound_address;  // what the Host header must name (or localhost)
  int listen_fd = -1;         // the listening socket, as cpp-httplib created it
  httplib::Server http;       // the routes: reads and answers a connection the gate handed over
  internal::GateListener listener;
  internal::Gate gate;

  std::mutex root_mutex;
  // The page's CSP, computed again only when the page changed.
  std::mutex csp_mutex;
  std::string csp_etag, csp;

  Impl(LiveReport& report, ServerLimits limits);
  ~Impl();
  int root();     // DIR, opened once it exists (serve may have started before compare created it)
  void limits();  // server.cpp: timeouts, sizes, socket options, default headers

  // routes.cpp
  void routes();
  httplib::Server::HandlerResponse screen(const httplib::Request& req, httplib::Response& res);
  std::string csp_of(const LiveReport::Page& page);
  void page(const httplib::Request& req, httplib::Response& res);
  void table(const httplib::Request& req, httplib::Response& res, bool runs);
  void markdown(const httplib::Request& req, httplib::Response& res);
  void status(const httplib::Request& req, httplib::Response& res);
  void series(const httplib::Request& req, httplib::Response& res);
  void chart_js(const httplib::Request& req, httplib::Response& res);
  void file(const httplib::Request& req, httplib::Response& res);
};

}  // namespace normlab::serve
