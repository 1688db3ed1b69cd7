// The gate between accept(2) and a thread (server_parts.hpp): one epoll loop holds every
// connection until its request is whole, refuses what the header checks refuse, and answers 408
// at the deadline and 503 past the caps, without a thread for any of it.
#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "server_parts.hpp"

namespace normlab::serve::internal {

namespace {

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

// The answer to a refused request, written without waiting (the socket buffer is empty: nothing
// was answered on it yet).
void write_refusal(int sock, int status, const std::string& why) {
  const std::string body = "normlab serve: " + why + "\n";
  const std::string response = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
      "Connection: close\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: {}\r\n{}\r\n{}",
      status, reason_phrase(status), body.size(), kFileCsp, status == 503 ? "Retry-After: 1\r\n" : "", body);
  [[maybe_unused]] const ssize_t n = ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
}

void drain(int sock) {
  char buffer[16384];
  while (::recv(sock, buffer, sizeof buffer, MSG_DONTWAIT) > 0) {
  }
}

// No room to linger: answer, drop what already arrived, close.
void answer_and_close(int sock, int status, const std::string& why) {
  write_refusal(sock, status, why);
  drain(sock);
  ::close(sock);
}

}  // namespace

Gate::Gate(ServerLimits limits, std::function<void(int)> serve) : limits_(limits), serve_(std::move(serve)) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    throw std::runtime_error(fmt::format("serve: cannot create an epoll loop: {}", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

Gate::~Gate() {
  stop();
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

void Gate::start() {
  const std::lock_guard<std::mutex> guard(mutex_);
  stopping_ = false;
  if (!poller_.joinable()) poller_ = std::thread([this] { poll_loop(); });
}

void Gate::admit(int sock) {
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

void Gate::stop() {
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

size_t Gate::waiting() const {
  const std::lock_guard<std::mutex> guard(mutex_);
  size_t n = 0;
  for (const auto& [sock, w] : waiting_) n += !w.closing;
  return n;
}

size_t Gate::busy() const {
  const std::lock_guard<std::mutex> guard(mutex_);
  return workers_.size();
}

void Gate::close_waiting(int sock) {
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock, nullptr);
  waiting_.erase(sock);
  ::close(sock);
}

// Answers and keeps reading the rest of the request until the client closes or the deadline.
void Gate::refuse(int sock, int status, const std::string& why) {
  write_refusal(sock, status, why);
  waiting_[sock].closing = true;
  linger(sock);
}

void Gate::linger(int sock) {
  char buffer[16384];
  for (ssize_t n;;) {
    n = ::recv(sock, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EAGAIN) return;
    close_waiting(sock);
    return;
  }
}

void Gate::examine(int sock, std::vector<char>& peek) {
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
  hand_over(sock);
}

// A thread of its own for a whole request.
void Gate::hand_over(int sock) {
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

void Gate::poll_loop() {
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

}  // namespace normlab::serve::internal
