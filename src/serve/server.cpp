// `normlab serve`'s server on cpp-httplib: one listener accepts and hands each connection to the
// gate (gate.cpp), which gives a whole request a thread of its own on a second httplib::Server that
// holds the routes (routes.cpp) but never listens. This file binds, wires the two together and
// sets the limits that keep the server safe to leave running. docs/serve.md is the reference.
#include "normlab/serve/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "normlab/error.hpp"
#include "server_parts.hpp"

namespace normlab::serve {

namespace internal {

// cpp-httplib 0.11 reads and answers one connection in Server::process_and_close_socket, a private
// virtual: a derived class may override it (GateListener, server_parts.hpp, whose override hands
// the connection to the gate) but not call it. The gate's workers call the original on a plain
// httplib::Server (the responder, Impl::http, which holds the routes) through a member pointer; the
// pointer is taken in an explicit instantiation, where access is not checked ([temp.spec.general]/6):
// Take<M> stores M, at static initialization, where taken<decltype(M)>() finds it.
template <typename Member>
Member& taken() {
  static Member member = nullptr;
  return member;
}
template <auto M>
struct Take {
  static inline const bool done = (taken<decltype(M)>() = M, true);
};
using ProcessSocket = bool (httplib::Server::*)(int);
ProcessSocket& process_socket() { return taken<ProcessSocket>(); }
template struct Take<&httplib::Server::process_and_close_socket>;
// The responder never listens, but cpp-httplib answers only while its listening socket is set
// (process_server_socket_core and the content providers' "is the server stopping" check compare it
// with INVALID_SOCKET, nothing else): the responder is given the listener's, and INVALID_SOCKET at
// stop, which also ends every answer still being written.
using ServerSocket = std::atomic<int> httplib::Server::*;
ServerSocket& server_socket() { return taken<ServerSocket>(); }
template struct Take<&httplib::Server::svr_sock_>;

// Runs each task where it is enqueued: the task is the gate's admit, which never blocks.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void shutdown() override {}
};

}  // namespace internal

Server::Impl::Impl(LiveReport& report, ServerLimits limits)
    : live(report), limits_set(internal::fit_to_descriptors(limits)),
      gate(limits_set, [this](int sock) { (http.*internal::process_socket())(sock); }) {
  listener.gate = &gate;
  root_fd = ::open(report.dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0 && !(errno == ENOENT && report.waiting()))
    throw InputError(fmt::format("{}: cannot open the directory: {}", report.dir(), std::strerror(errno)));
}

Server::Impl::~Impl() {
  if (root_fd >= 0) ::close(root_fd);
}

int Server::Impl::root() {
  const std::lock_guard<std::mutex> guard(root_mutex);
  if (root_fd < 0) root_fd = ::open(live.dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  return root_fd;
}

void Server::Impl::limits() {
  listener.new_task_queue = [] { return new internal::InlineQueue(); };
  listener.set_read_timeout(1);
  listener.set_write_timeout(limits_set.write_timeout_s);
  // The gate handed over a whole request: reading it never waits. Writing waits for the client
  // to read, at most write_timeout_s at a time.
  http.set_read_timeout(1);
  http.set_write_timeout(limits_set.write_timeout_s);
  // One request per connection: a kept-alive connection would hold its thread while idle; the
  // gate holds a new connection's wait instead, without a thread (on loopback a connection
  // costs less than a millisecond).
  http.set_keep_alive_max_count(1);
  http.set_payload_max_length(internal::kMaxBodyBytes);
  // SO_REUSEADDR only (cpp-httplib's default adds SO_REUSEPORT, which lets a second server
  // listen on the same port and take half the requests).
  listener.set_socket_options([this](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
  http.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                            {"Content-Security-Policy", internal::kFileCsp},
                            {"Referrer-Policy", "no-referrer"},
                            {"Cross-Origin-Resource-Policy", "same-origin"},
                            {"X-Frame-Options", "DENY"}});
}

Server::Server(LiveReport& live, ServerLimits limits) : impl_(std::make_unique<Impl>(live, limits)) {
  impl_->routes();
  impl_->limits();
}

Server::~Server() = default;

int Server::bind(const std::string& address, int port) {
  unsigned char buffer[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, address.c_str(), buffer) != 1 && ::inet_pton(AF_INET6, address.c_str(), buffer) != 1)
    throw InputError(fmt::format("--bind {}: not an IP address (e.g. 127.0.0.1, ::1)", address));
  if (port < 0 || port > 65535)
    throw InputError(fmt::format("--port {}: must be in 0..65535 (0: any free port)", port));
  impl_->bound_address = address;
  auto& listener = impl_->listener;
  const int bound = port == 0 ? listener.bind_to_any_port(address) : (listener.bind_to_port(address, port) ? port : -1);
  if (bound < 0 && port == 0)
    throw InputError(fmt::format("--bind {}: cannot listen there: not an address of this machine", address));
  if (bound < 0)
    throw InputError(
        fmt::format("cannot listen on {}:{}: the port is in use or the address is not this machine's; "
                    "choose another --port (0 picks a free one)",
                    address, port));
  // cpp-httplib listens with a backlog of 5 (compiled into the library): a burst of connections
  // beyond it waits for SYN retransmissions (1 s, 3 s, ...). listen(2) again raises the backlog.
  ::listen(impl_->listen_fd, SOMAXCONN);
  (impl_->http.*internal::server_socket()).store(impl_->listen_fd);
  return bound;
}

void Server::run() {
  impl_->gate.start();
  impl_->listener.listen_after_bind();
  impl_->gate.stop();  // the accepting loop has ended: no admit() races this
}

void Server::stop() {
  (impl_->http.*internal::server_socket()).store(-1);
  impl_->listener.stop();
}

bool Server::running() const { return impl_->listener.is_running(); }
size_t Server::waiting() const { return impl_->gate.waiting(); }
size_t Server::busy() const { return impl_->gate.busy(); }

}  // namespace normlab::serve
