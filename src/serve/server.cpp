// `normlab serve`'s routes on cpp-httplib, and what keeps them safe to leave running: one thread
// per connection (bounded), a Host check, security headers, a strict CSP, one range at most, and
// files opened beneath DIR by the kernel (openat2 RESOLVE_BENEATH). docs/serve.md is the reference.
#include "normlab/serve/server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <linux/openat2.h>
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
#include <thread>

#include "normlab/error.hpp"
#include "normlab/serve/page.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

namespace {

constexpr off_t kMaxFileBytes = 64 << 20;  // larger files (checkpoints) are not served
constexpr size_t kMaxConnections = 256;    // connections served at once, one thread each
constexpr int kReadTimeoutS = 5;           // a client silent this long mid-request is dropped
constexpr int kKeepAliveS = 3;             // an idle kept-alive connection is closed after this

// Every response but the page itself: nothing in it may run or load anything, and a file from DIR
// (an .html or .svg among them) renders in a sandbox with an opaque origin, never on the page's.
const char* kFileCsp = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:";

std::string content_type(const std::string& file) {
  static const std::map<std::string, std::string> types = {
      {".html", "text/html; charset=utf-8"}, {".svg", "image/svg+xml"},    {".png", "image/png"},
      {".csv", "text/csv; charset=utf-8"},   {".json", "application/json"}, {".jsonl", "text/plain; charset=utf-8"},
      {".md", "text/plain; charset=utf-8"},  {".log", "text/plain; charset=utf-8"}};
  const auto it = types.find(fs::path(file).extension().string());
  return it == types.end() ? "application/octet-stream" : it->second;
}

// cpp-httplib hands each accepted connection to a TaskQueue; its default pool has 8 threads, so 8
// slow or kept-alive clients stall everyone. Here each connection gets its own thread, at most
// kMaxConnections at once: a slow client holds only its own thread until its read times out. When
// all are busy, enqueue (called by the accepting thread) waits for one to end, so further
// connections wait in the kernel's listen backlog rather than in an unbounded queue.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> serve_connection) override {
    std::unique_lock<std::mutex> lock(mutex_);
    slot_free_.wait(lock, [&] { return active_ < kMaxConnections; });
    reap_finished();
    ++active_;
    auto done = std::make_shared<std::atomic<bool>>(false);
    threads_.push_back({std::thread([this, serve_connection = std::move(serve_connection), done] {
                          serve_connection();
                          const std::lock_guard<std::mutex> guard(mutex_);
                          --active_;
                          done->store(true);
                          slot_free_.notify_all();
                        }),
                        done});
  }
  void shutdown() override {
    std::list<Worker> all;
    {
      const std::lock_guard<std::mutex> guard(mutex_);
      all.swap(threads_);
    }
    for (Worker& w : all) w.thread.join();
  }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reap_finished() {  // under mutex_
    for (auto it = threads_.begin(); it != threads_.end();)
      if (it->done->load()) {
        it->thread.join();  // returns at once: the thread only has to leave its lock_guard
        it = threads_.erase(it);
      } else {
        ++it;
      }
  }
  std::mutex mutex_;
  std::condition_variable slot_free_;
  size_t active_ = 0;
  std::list<Worker> threads_;
};

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
      hashes[kind] += fmt::format(" 'sha256-{}'", sha256_base64(std::string_view(html).substr(text_at + 1, end - text_at - 1)));
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

struct Server::Impl {
  LiveReport& live;
  int root_fd = -1;           // DIR, opened once: every file is opened beneath it
  std::string bound_address;  // what the Host header must name (or localhost)
  int listen_fd = -1;         // the listening socket, as cpp-httplib created it
  httplib::Server http;

  std::mutex root_mutex;

  explicit Impl(LiveReport& report) : live(report) {
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
    if (!host_allowed(req.get_header_value("Host"), bound_address))
      return refuse(403, "the Host header must name this server (localhost or " + bound_address + ")");
    // Several ranges would each copy the file into one multipart answer (4 ranges of a 64 MiB file:
    // 256 MiB); one range, or none, is all a browser asks for. The body stays empty: cpp-httplib
    // would cut a body to the ranges again.
    if (req.ranges.size() > 1) return refuse(416, "");
    return httplib::Server::HandlerResponse::Unhandled;
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
    res.set_content(runs ? live.page().runs_csv : live.curves_csv(), "text/csv; charset=utf-8");
  }

  // The live report as Markdown (report.md of what the page shows now).
  void markdown(const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_content(live.page().report_md, "text/plain; charset=utf-8");
  }

  // What the page's script polls: a 304 while the page's ETag is the one it has.
  void status(const httplib::Request& req, httplib::Response& res) {
    const LiveReport::Page page = live.page();
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
      res.set_content("normlab serve: Chart.js is not installed (apt-get install libjs-chart.js)\n", "text/plain; charset=utf-8");
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
    std::string bytes(size_t(st.st_size), '\0');
    size_t got = 0;
    for (ssize_t n; got < bytes.size() && (n = ::pread(opened.fd, bytes.data() + got, bytes.size() - got, off_t(got))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        res.status = 403;
        res.set_content("normlab serve: cannot read the file\n", "text/plain; charset=utf-8");
        return;
      }
      got += size_t(n);
    }
    bytes.resize(got);  // a file that shrank while read
    res.set_header("Cache-Control", "no-cache");
    res.set_content(bytes, content_type(req.path).c_str());
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
    http.new_task_queue = [] { return new ConnectionThreads(); };
    http.set_read_timeout(kReadTimeoutS);
    http.set_write_timeout(kReadTimeoutS);
    http.set_keep_alive_timeout(kKeepAliveS);
    http.set_keep_alive_max_count(100);
    http.set_payload_max_length(64 << 10);  // no route takes a body
    // SO_REUSEADDR only (cpp-httplib's default adds SO_REUSEPORT, which lets a second server
    // listen on the same port and take half the requests).
    http.set_socket_options([this](int sock) {
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

Server::Server(LiveReport& live) : impl_(std::make_unique<Impl>(live)) {
  impl_->routes();
  impl_->limits();
}

Server::~Server() = default;

int Server::bind(const std::string& address, int port) {
  unsigned char buffer[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, address.c_str(), buffer) != 1 && ::inet_pton(AF_INET6, address.c_str(), buffer) != 1)
    throw InputError(fmt::format("--bind {}: not an IP address (e.g. 127.0.0.1, ::1)", address));
  if (port < 0 || port > 65535) throw InputError(fmt::format("--port {}: must be in 0..65535 (0: any free port)", port));
  impl_->bound_address = address;
  const int bound = port == 0 ? impl_->http.bind_to_any_port(address) : (impl_->http.bind_to_port(address, port) ? port : -1);
  if (bound < 0 && port == 0)
    throw InputError(fmt::format("--bind {}: cannot listen there: not an address of this machine", address));
  if (bound < 0)
    throw InputError(fmt::format("cannot listen on {}:{}: the port is in use or the address is not this machine's; "
                                 "choose another --port (0 picks a free one)",
                                 address, port));
  // cpp-httplib listens with a backlog of 5 (compiled into the library): a burst of connections
  // beyond it waits for SYN retransmissions (1 s, 3 s, ...). listen(2) again raises the backlog.
  ::listen(impl_->listen_fd, SOMAXCONN);
  return bound;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() { impl_->http.stop(); }

}  // namespace normlab::serve
