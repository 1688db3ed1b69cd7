// `normlab serve`'s routes on cpp-httplib, and what keeps them safe to leave running: a gate that
// holds each connection without a thread until its request is whole (deadline 408, caps 503, the
// header checked per RFC 9110/9112), a Host check, security headers, a strict CSP, one range at
// most and clamped to the file, files streamed from a descriptor opened beneath DIR by the kernel
// (openat2 RESOLVE_BENEATH). docs/serve.md is the reference.
#include "normlab/serve/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <linux/openat2.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/serve/page.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

namespace {

constexpr off_t kMaxFileBytes = 64 << 20;  // larger files (checkpoints) are not served

// Every response but the page itself: nothing in it may run or load anything, and a file from DIR
// (an .html or .svg among them) renders in a sandbox with an opaque origin, never on the page's.
const char* kFileCsp = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:";

std::string content_type(const std::string& file) {
  static const std::map<std::string, std::string> types = {{".html", "text/html; charset=utf-8"},
                                                           {".svg", "image/svg+xml"},
                                                           {".png", "image/png"},
                                                           {".csv", "text/csv; charset=utf-8"},
                                                           {".json", "application/json"},
                                                           {".jsonl", "text/plain; charset=utf-8"},
                                                           {".md", "text/plain; charset=utf-8"},
                                                           {".log", "text/plain; charset=utf-8"}};
  const auto it = types.find(fs::path(file).extension().string());
  return it == types.end() ? "application/octet-stream" : it->second;
}

// The status line's words for the statuses the gate writes itself.
const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
  }
  return "Error";
}

// What the gate decides about a request whose start it has seen (peeked, not read).
struct Verdict {
  int status = 0;   // 0: not complete yet; 200: complete, hand it over; else: refuse with this status
  std::string why;  // the refusal's one line
};

constexpr size_t kMaxHeaderBytes = 16 << 10;  // request line and headers
constexpr size_t kMaxBodyBytes = 64 << 10;    // no route takes a body; a small one is read and ignored

// The request in `bytes` (what has arrived so far): complete, incomplete, or refused. RFC 9110/9112:
// a field value holds no control byte but HTAB (a NUL in Host would let "localhost\0.evil.com" pass
// a check that stops at the NUL); several Content-Length values that differ make the message's
// length ambiguous (request smuggling): 400; a body of unknown length (Transfer-Encoding): 411.
Verdict examine_request(std::string_view bytes) {
  size_t head_end = bytes.find("\r\n\r\n");
  size_t body_at = head_end == std::string_view::npos ? head_end : head_end + 4;
  if (const size_t lf = bytes.find("\n\n");
      lf != std::string_view::npos && (head_end == std::string_view::npos || lf < head_end))
    head_end = lf, body_at = lf + 2;
  if (head_end == std::string_view::npos) {
    if (bytes.size() >= kMaxHeaderBytes) return {431, "the request's header is over 16 KiB"};
    return {};
  }
  const std::string_view head = bytes.substr(0, head_end);
  if (head.size() > kMaxHeaderBytes) return {431, "the request's header is over 16 KiB"};
  for (size_t from = 0, to; from < head.size(); from = to + 1) {
    to = std::min(head.find('\n', from), head.size());
    if (to - from > 8000)
      return {431, "a request header line over 8,000 bytes"};  // cpp-httplib reads at most 8 KiB a line
  }
  for (const char c : head)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f)
      return {400, "a control byte in the request's header"};
  std::string length;
  for (size_t at = head.find('\n'); at != std::string_view::npos; at = head.find('\n', at + 1)) {
    const size_t next = head.find('\n', at + 1);
    std::string_view line = head.substr(at + 1, (next == std::string_view::npos ? head.size() : next) - at - 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (name == "transfer-encoding") return {411, "a request body needs a Content-Length (no route takes a body)"};
    if (name != "content-length") continue;
    if (value.empty() || value.size() > 18 ||
        !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return {400, "Content-Length is not a number"};
    if (!length.empty() && length != value) return {400, "two different Content-Length headers"};
    length = value;
  }
  const size_t body = length.empty() ? 0 : size_t(std::stoull(length));
  if (body > kMaxBodyBytes) return {413, "request bodies over 64 KiB are refused"};
  return {bytes.size() >= body_at + body ? 200 : 0, ""};
}

}  // namespace

// Named (not anonymous): Server::Impl, declared in the header, holds them.
namespace internal {

// Between accept(2) and a thread: every connection waits here, in one epoll loop and without a
// thread, until its whole request has arrived (peeked, not read: cpp-httplib reads it afterwards).
// A client that is idle, half-sent or trickles a byte at a time holds a descriptor until its
// deadline (408), never a thread; past `max_waiting` waiting connections, or `max_connections`
// requests being answered, a new one is answered 503 at once instead of queueing. A refused
// connection is closed gracefully: the answer, a FIN, and its remaining input read and dropped
// until the client closes or the deadline, so the client reads the answer instead of a reset.
class Gate {
 public:
  Gate(ServerLimits limits, std::function<void(int)> serve) : limits_(limits), serve_(std::move(serve)) {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ < 0 || wake_fd_ < 0)
      throw std::runtime_error(fmt::format("serve: cannot create an epoll loop: {}", std::strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  }
  ~Gate() {
    stop();
    ::close(epoll_fd_);
    ::close(wake_fd_);
  }

  void start() {
    const std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = false;
    if (!poller_.joinable()) poller_ = std::thread([this] { poll_loop(); });
  }

  // On the accepting thread, once per connection: cheap, never blocks.
  void admit(int sock) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (stopping_ || waiting_.size() >= limits_.max_waiting) {
      lock.unlock();
      answer_and_close(sock, 503, "too many connections waiting; try again");
      return;
    }
    waiting_[sock] = Waiting{std::chrono::steady_clock::now() + limits_.request_deadline, false};
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = sock;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock, &ev) != 0) {
      waiting_.erase(sock);
      lock.unlock();
      ::close(sock);
    }
  }

  void stop() {
    {
      const std::lock_guard<std::mutex> guard(mutex_);
      stopping_ = true;
      for (const auto& [sock, worker] : workers_) ::shutdown(worker.wake, SHUT_RDWR);  // a slow reader's write ends now
    }
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
    if (poller_.joinable()) poller_.join();
    std::unique_lock<std::mutex> lock(mutex_);
    for (const auto& [sock, w] : waiting_) ::close(sock);
    waiting_.clear();
    worker_done_.wait(lock, [&] { return workers_.empty(); });
    for (Worker& w : finished_) w.thread.join(), ::close(w.wake);
    finished_.clear();
  }

  size_t waiting() const {
    const std::lock_guard<std::mutex> guard(mutex_);
    size_t n = 0;
    for (const auto& [sock, w] : waiting_) n += !w.closing;
    return n;
  }
  size_t busy() const {
    const std::lock_guard<std::mutex> guard(mutex_);
    return workers_.size();
  }

 private:
  struct Waiting {
    std::chrono::steady_clock::time_point deadline;
    bool closing = false;  // answered and shut for writing: its input is read and dropped
  };
  struct Worker {
    std::thread thread;
    int wake = -1;  // a dup of its socket: shutdown(2) on it ends the worker's blocking write at stop
  };

  // The answer to a refused request, written without waiting (the socket buffer is empty: nothing
  // was answered on it yet).
  static void write_refusal(int sock, int status, const std::string& why) {
    const std::string body = "normlab serve: " + why + "\n";
    const std::string response = fmt::format(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
        "Connection: close\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: {}\r\n{}\r\n{}",
        status, reason_phrase(status), body.size(), kFileCsp, status == 503 ? "Retry-After: 1\r\n" : "", body);
    [[maybe_unused]] const ssize_t n = ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::shutdown(sock, SHUT_WR);
  }
  static void drain(int sock) {
    char buffer[16384];
    while (::recv(sock, buffer, sizeof buffer, MSG_DONTWAIT) > 0) {
    }
  }
  // No room to linger: answer, drop what already arrived, close.
  static void answer_and_close(int sock, int status, const std::string& why) {
    write_refusal(sock, status, why);
    drain(sock);
    ::close(sock);
  }

  void close_waiting(int sock) {  // under mutex_
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock, nullptr);
    waiting_.erase(sock);
    ::close(sock);
  }

  // Answers and keeps reading the rest of the request until the client closes or the deadline.
  void refuse(int sock, int status, const std::string& why) {  // under mutex_
    write_refusal(sock, status, why);
    waiting_[sock].closing = true;
    linger(sock);
  }
  void linger(int sock) {  // under mutex_
    char buffer[16384];
    for (ssize_t n;;) {
      n = ::recv(sock, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n > 0) continue;
      if (n < 0 && errno == EAGAIN) return;
      close_waiting(sock);
      return;
    }
  }

  void examine(int sock, std::vector<char>& peek) {  // under mutex_
    auto it = waiting_.find(sock);
    if (it == waiting_.end()) return;
    if (it->second.closing) return linger(sock);
    const ssize_t n = ::recv(sock, peek.data(), peek.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return close_waiting(sock);  // left without a request
    if (n < 0) return;
    const Verdict verdict = examine_request(std::string_view(peek.data(), size_t(n)));
    if (verdict.status == 0) return;
    if (verdict.status != 200) return refuse(sock, verdict.status, verdict.why);
    if (workers_.size() >= limits_.max_connections) return refuse(sock, 503, "too many requests at once; try again");
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock, nullptr);
    waiting_.erase(it);
    // By its own number, not its socket's: the socket's number is free again once serve_ closed it.
    const uint64_t id = next_worker_++;
    Worker& w = workers_[id];
    w.wake = ::dup(sock);
    w.thread = std::thread([this, sock, id] {
      serve_(sock);  // reads and answers the request, then closes `sock`
      const std::lock_guard<std::mutex> guard(mutex_);
      auto self = workers_.find(id);
      finished_.push_back(std::move(self->second));  // joined by the poller or stop() (its thread is ending)
      workers_.erase(self);
      worker_done_.notify_all();
    });
  }

  void poll_loop() {
    std::vector<char> peek(kMaxHeaderBytes + kMaxBodyBytes + 1);
    epoll_event events[256];
    for (;;) {
      const int n = ::epoll_wait(epoll_fd_, events, 256, 50);  // 50 ms: the deadlines' resolution
      const std::lock_guard<std::mutex> guard(mutex_);
      if (stopping_) return;
      for (int i = 0; i < n; ++i)
        if (events[i].data.fd != wake_fd_) examine(events[i].data.fd, peek);
      const auto now = std::chrono::steady_clock::now();
      std::vector<std::pair<int, bool>> late;
      for (const auto& [sock, w] : waiting_)
        if (w.deadline <= now) late.emplace_back(sock, w.closing);
      for (const auto& [sock, closing] : late) {
        if (!closing) write_refusal(sock, 408, "the request did not arrive in time");
        close_waiting(sock);
      }
      for (Worker& w : finished_) w.thread.join(), ::close(w.wake);
      finished_.clear();
    }
  }

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

// The limits this process can keep: the descriptor limit raised to its hard maximum (waiting
// connections hold one descriptor each; a request being answered, three: its socket, a dup, the
// file), and the caps lowered to fit under it.
ServerLimits fit_to_descriptors(ServerLimits limits) {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
      ::getrlimit(RLIMIT_NOFILE, &files);
    }
    const size_t available = files.rlim_cur > 128 ? size_t(files.rlim_cur) - 128 : 16;
    limits.max_connections = std::max<size_t>(1, std::min(limits.max_connections, available / 6));
    limits.max_waiting = std::max<size_t>(1, std::min(limits.max_waiting, available - 3 * limits.max_connections));
  }
  return limits;
}

// cpp-httplib 0.11 reads and answers one connection in Server::process_and_close_socket, a private
// virtual: a derived class may override it (the listener below, whose override hands the
// connection to the gate) but not call it. The gate's workers call the original on a plain
// httplib::Server (`responder`, which holds the routes) through a member pointer; the pointer is
// taken in an explicit instantiation, where access is not checked ([temp.spec.general]/6).
using ProcessSocket = bool (httplib::Server::*)(int);
ProcessSocket& process_socket() {
  static ProcessSocket fn = nullptr;
  return fn;
}
template <ProcessSocket F>
struct TakeProcessSocket {
  static inline const bool taken = (process_socket() = F, true);
};
template struct TakeProcessSocket<&httplib::Server::process_and_close_socket>;
// The responder never listens, but cpp-httplib answers only while its listening socket is set
// (process_server_socket_core and the content providers' "is the server stopping" check compare it
// with INVALID_SOCKET, nothing else): the responder is given the listener's, and INVALID_SOCKET at
// stop, which also ends every answer still being written.
using ServerSocket = std::atomic<int> httplib::Server::*;
ServerSocket& server_socket() {
  static ServerSocket member = nullptr;
  return member;
}
template <ServerSocket M>
struct TakeServerSocket {
  static inline const bool taken = (server_socket() = M, true);
};
template struct TakeServerSocket<&httplib::Server::svr_sock_>;

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

// Runs each task where it is enqueued: the task is the gate's admit, which never blocks.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void shutdown() override {}
};

}  // namespace internal

namespace {

// "'sha256-BASE64'" of every inline <script> and <style> element's text in `html`, and of Chart.js:
// the CSP that lets exactly the page's own code run, and nothing injected beside it.
std::string inline_hashes(const std::string& html) {
  std::string hashes[2];  // script, style
  const char* names[2] = {"script", "style"};
  for (int kind = 0; kind < 2; ++kind) {
    const std::string open = std::string("<") + names[kind], close = std::string("</") + names[kind] + ">";
    for (size_t at = html.find(open); at != std::string::npos; at = html.find(open, at + 1)) {
      const char after = at + open.size() < html.size() ? html[at + open.size()] : '\0';
      if (after != '>' && after != ' ') continue;  // <scripts>, <styled>: other elements
      const size_t text_at = html.find('>', at), end = html.find(close, at);
      if (text_at == std::string::npos || end == std::string::npos || end < text_at) break;
      hashes[kind] +=
          fmt::format(" 'sha256-{}'", sha256_base64(std::string_view(html).substr(text_at + 1, end - text_at - 1)));
    }
  }
  // Chart.js, served by this server, is named by its hash too (the page loads it with integrity=).
  if (!chart_library().empty()) hashes[0] += fmt::format(" 'sha256-{}'", sha256_base64(chart_library()));
  return fmt::format("script-src{}; style-src{}", hashes[0].empty() ? " 'none'" : hashes[0],
                     hashes[1].empty() ? " 'none'" : hashes[1]);
}

// The page's CSP: its own inline script and styles (by hash), images only as data: URLs,
// and fetches of its own URL only; no plugins, frames, forms or base-URL tricks.
std::string page_csp(const std::string& html) {
  return "default-src 'none'; " + inline_hashes(html) +
         "; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
         "frame-ancestors 'none'";
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

bool host_allowed(const std::string& host_header, const std::string& bound_address) {
  std::string host = host_header;
  if (!host.empty() && host[0] == '[') {  // [v6]:port
    const size_t close = host.find(']');
    if (close == std::string::npos) return false;
    const std::string rest = host.substr(close + 1);
    if (!rest.empty() && !std::regex_match(rest, std::regex(":[0-9]{1,5}"))) return false;
    host = host.substr(1, close - 1);
  } else if (const size_t colon = host.find(':'); colon != std::string::npos) {
    if (!std::regex_match(host.substr(colon), std::regex(":[0-9]{1,5}"))) return false;
    host = host.substr(0, colon);
  }
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (host == "localhost") return true;
  // An IP literal is safe from DNS rebinding (the browser's origin is the address itself); it must
  // still be this server's address unless the server listens on all of them.
  auto parse = [](const std::string& text, int& family, unsigned char* bytes) {
    for (int f : {AF_INET, AF_INET6})
      if (::inet_pton(f, text.c_str(), bytes) == 1) return family = f, true;
    return false;
  };
  unsigned char a[sizeof(in6_addr)] = {}, b[sizeof(in6_addr)] = {};
  int host_family = 0, bound_family = 0;
  if (!parse(host, host_family, a) || !parse(bound_address, bound_family, b)) return false;
  if (std::all_of(b, b + sizeof b, [](unsigned char byte) { return byte == 0; })) return true;  // 0.0.0.0, ::
  return host_family == bound_family && std::equal(a, a + sizeof a, b);
}

using internal::fit_to_descriptors;
using internal::Gate;
using internal::GateListener;
using internal::InlineQueue;
using internal::process_socket;
using internal::server_socket;

struct Server::Impl {
  LiveReport& live;
  ServerLimits limits_set;
  int root_fd = -1;           // DIR, opened once: every file is opened beneath it
  std::string bound_address;  // what the Host header must name (or localhost)
  int listen_fd = -1;         // the listening socket, as cpp-httplib created it
  httplib::Server http;       // the routes: reads and answers a connection the gate handed over
  GateListener listener;
  Gate gate;

  std::mutex root_mutex;

  Impl(LiveReport& report, ServerLimits limits)
      : live(report), limits_set(fit_to_descriptors(limits)),
        gate(limits_set, [this](int sock) { (http.*process_socket())(sock); }) {
    listener.gate = &gate;
    root_fd = ::open(report.dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0 && !(errno == ENOENT && report.waiting()))
      throw InputError(fmt::format("{}: cannot open the directory: {}", report.dir(), std::strerror(errno)));
  }
  ~Impl() {
    if (root_fd >= 0) ::close(root_fd);
  }

  // DIR, opened once it exists (serve may have started before compare created it).
  int root() {
    const std::lock_guard<std::mutex> guard(root_mutex);
    if (root_fd < 0) root_fd = ::open(live.dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    return root_fd;
  }

  // Before any route: the method, the Host, the number of ranges. Refusals close the connection
  // (a refused request's body, if any, is never read).
  httplib::Server::HandlerResponse screen(const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](int status, const std::string& why) {
      res.status = status;
      res.set_header("Connection", "close");
      if (!why.empty()) res.set_content("normlab serve: " + why + "\n", "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      return refuse(405, "read-only: GET and HEAD only");
    }
    // The gate refused these before a thread was given; a request that reached here another way
    // (none does) is held to the same rules.
    const std::string host = req.get_header_value("Host");
    if (std::any_of(host.begin(), host.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
      return refuse(400, "a control byte in the Host header");
    if (req.get_header_value_count("Content-Length") > 1) {
      const auto lengths = req.headers.equal_range("Content-Length");
      for (auto it = lengths.first; it != lengths.second; ++it)
        if (it->second != lengths.first->second) return refuse(400, "two different Content-Length headers");
    }
    if (!host_allowed(host, bound_address))
      return refuse(403, "the Host header must name this server (localhost or " + bound_address + ")");
    // Several ranges would each copy the file into one multipart answer (4 ranges of a 64 MiB file:
    // 256 MiB); one range, or none, is all a browser asks for. The body stays empty: cpp-httplib
    // would cut a body to the ranges again.
    if (req.ranges.size() > 1) return refuse(416, "");
    // The page and the live tables are drawn anew for each request: a Range on them is ignored
    // (RFC 9110 lets a server send the whole representation, 200), so no range can outrun them.
    if (!req.ranges.empty() && !is_file_route(req.path)) const_cast<httplib::Request&>(req).ranges.clear();
    return httplib::Server::HandlerResponse::Unhandled;
  }

  static bool is_file_route(const std::string& path) {
    return !(path == "/" || path == "/index.html" || path == "/runs.csv" || path == "/curves.csv" ||
             path == "/report.md" || path.rfind("/_serve/", 0) == 0);
  }

  // The page's CSP, computed again only when the page changed.
  std::mutex csp_mutex;
  std::string csp_etag, csp;
  std::string csp_of(const LiveReport::Page& page) {
    const std::lock_guard<std::mutex> guard(csp_mutex);
    if (csp_etag != page.etag) csp = page_csp(page.html), csp_etag = page.etag;
    return csp;
  }

  // The ETag and no-cache headers of a response, and a 304 (true) when the client already has `etag`.
  static bool not_modified(const httplib::Request& req, httplib::Response& res, const std::string& etag) {
    res.set_header("ETag", etag);
    res.set_header("Cache-Control", "no-cache");
    if (req.get_header_value("If-None-Match") != etag) return false;
    res.status = 304;
    return true;
  }

  void page(const httplib::Request& req, httplib::Response& res) {
    const LiveReport::Page page = live.page();
    res.headers.erase("Content-Security-Policy");  // the default one; the page's own follows
    res.set_header("Content-Security-Policy", csp_of(page));
    if (!not_modified(req, res, page.etag)) res.set_content(page.html, "text/html; charset=utf-8");
  }

  void table(const httplib::Request&, httplib::Response& res, bool runs) {
    res.set_header("Cache-Control", "no-cache");
    if (runs) return res.set_content(live.page().runs_csv, "text/csv; charset=utf-8");
    // curves.csv holds every point of every run: written in pieces of about 1 MB as the client
    // reads (chunked; gzip streams too), never whole in memory.
    auto rows = std::make_shared<LiveReport::CurvesWriter>(live.curves_writer());
    res.set_chunked_content_provider("text/csv; charset=utf-8", [rows](size_t, httplib::DataSink& sink) {
      const std::string piece = rows->next(1 << 20);
      if (piece.empty()) {
        sink.done();
        return true;
      }
      return sink.write(piece.data(), piece.size());
    });
  }

  // The live report as Markdown (report.md of what the page shows now).
  void markdown(const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(live.page().report_md, "text/plain; charset=utf-8");
  }

  // What the page's script polls: a 304 while the page's ETag is the one it has.
  void status(const httplib::Request& req, httplib::Response& res) {
    const LiveReport::Page page = live.latest();
    const std::string etag = page.etag.substr(0, page.etag.size() - 1) + "-status\"";
    if (!not_modified(req, res, etag)) res.set_content(page.status_json, "application/json");
  }

  // One run's series of one metric, downsampled; a 304 while its metrics.jsonl has not changed.
  void series(const httplib::Request& req, httplib::Response& res) {
    const LiveReport::SeriesAnswer answer = live.series(req.get_param_value("run"), req.get_param_value("metric"));
    if (answer.json.empty()) {
      res.status = 404;
      res.set_content("normlab serve: no such run\n", "text/plain; charset=utf-8");
      return;
    }
    if (!not_modified(req, res, answer.etag)) res.set_content(answer.json, "application/json");
  }

  // Chart.js from Debian's libjs-chart.js, read once; the browser may keep it (it never changes
  // while this server runs).
  void chart_js(const httplib::Request&, httplib::Response& res) {
    if (chart_library().empty()) {
      res.status = 404;
      res.set_content("normlab serve: Chart.js is not installed (apt-get install libjs-chart.js)\n",
                      "text/plain; charset=utf-8");
      return;
    }
    res.set_header("Cache-Control", "max-age=3600");
    res.set_content(chart_library(), "text/javascript; charset=utf-8");
  }

  void file(const httplib::Request& req, httplib::Response& res) {
    const int dir_fd = root();
    if (dir_fd < 0) {
      res.status = 404;
      res.set_content("normlab serve: the directory does not exist yet\n", "text/plain; charset=utf-8");
      return;
    }
    const OpenedFile opened = open_request_path(dir_fd, req.path);
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
    // One range (screen() refused more): clamped to the file (RFC 9110 14.1.2: a last position past
    // the end means the end; a suffix longer than the file, the whole file), written back as the
    // single [first, last] cpp-httplib sends. One that starts past the end is 416, "bytes */size".
    if (!req.ranges.empty()) {
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
        return;
      }
      ranges[0] = {from, to};
    }
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

  void routes() {
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    http.set_pre_routing_handler([this](Req req, Res res) { return screen(req, res); });
    http.Get("/", [this](Req req, Res res) { page(req, res); });
    http.Get("/index.html", [this](Req req, Res res) { page(req, res); });
    http.Get("/runs.csv", [this](Req req, Res res) { table(req, res, true); });
    http.Get("/curves.csv", [this](Req req, Res res) { table(req, res, false); });
    http.Get("/report.md", [this](Req req, Res res) { markdown(req, res); });
    http.Get("/_serve/status.json", [this](Req req, Res res) { status(req, res); });
    http.Get("/_serve/series.json", [this](Req req, Res res) { series(req, res); });
    http.Get("/_serve/chart.js", [this](Req req, Res res) { chart_js(req, res); });
    http.Get(R"(/.*)", [this](Req req, Res res) { file(req, res); });
    http.set_exception_handler([](Req, Res res, std::exception_ptr error) {
      std::string what = "unknown";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      res.status = 500;
      res.set_content("normlab serve: internal error: " + what + "\n", "text/plain; charset=utf-8");
    });
  }

  void limits() {
    listener.new_task_queue = [] { return new InlineQueue(); };
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
    http.set_payload_max_length(kMaxBodyBytes);
    // SO_REUSEADDR only (cpp-httplib's default adds SO_REUSEPORT, which lets a second server
    // listen on the same port and take half the requests).
    listener.set_socket_options([this](int sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });
    http.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                              {"Content-Security-Policy", kFileCsp},
                              {"Referrer-Policy", "no-referrer"},
                              {"Cross-Origin-Resource-Policy", "same-origin"},
                              {"X-Frame-Options", "DENY"}});
  }
};

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
  (impl_->http.*server_socket()).store(impl_->listen_fd);
  return bound;
}

void Server::run() {
  impl_->gate.start();
  impl_->listener.listen_after_bind();
  impl_->gate.stop();  // the accepting loop has ended: no admit() races this
}

void Server::stop() {
  (impl_->http.*server_socket()).store(-1);
  impl_->listener.stop();
}

bool Server::running() const { return impl_->listener.is_running(); }
size_t Server::waiting() const { return impl_->gate.waiting(); }
size_t Server::busy() const { return impl_->gate.busy(); }

}  // namespace normlab::serve
