// `normlab serve`'s routes on cpp-httplib. Files are looked up under DIR only: every request path
// is checked segment by segment and then once more after the links in it are resolved.
#include "normlab/serve/server.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "normlab/error.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

namespace {

constexpr std::uintmax_t kMaxFileBytes = 64u << 20;  // larger files (checkpoints) are not served

std::string content_type(const fs::path& file) {
  static const std::map<std::string, std::string> types = {
      {".html", "text/html; charset=utf-8"}, {".svg", "image/svg+xml"},    {".png", "image/png"},
      {".csv", "text/csv; charset=utf-8"},   {".json", "application/json"}, {".jsonl", "text/plain; charset=utf-8"},
      {".md", "text/plain; charset=utf-8"},  {".log", "text/plain; charset=utf-8"}};
  const auto it = types.find(file.extension().string());
  return it == types.end() ? "application/octet-stream" : it->second;
}

}  // namespace

Resolved resolve_request_path(const std::string& root, const std::string& request_path) {
  if (request_path.find('\0') != std::string::npos) return {403, ""};
  fs::path relative;
  std::istringstream segments(request_path);
  std::string segment;
  while (std::getline(segments, segment, '/')) {
    if (segment.empty() || segment == ".") continue;
    if (segment == "..") return {403, ""};
    if (segment[0] == '.') return {404, ""};
    relative /= segment;
  }
  if (relative.empty()) return {404, ""};
  const fs::path candidate = fs::path(root) / relative;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(candidate, ec))) return {404, ""};
  const fs::path real = fs::canonical(candidate, ec);
  if (ec) return {404, ""};  // a dangling link
  const fs::path inside = real.lexically_relative(root);
  if (inside.empty() || *inside.begin() == "..") return {403, ""};
  if (!fs::is_regular_file(real, ec)) return {404, ""};
  return {200, real.string()};
}

struct Server::Impl {
  LiveReport& live;
  std::string root;  // DIR, canonical
  httplib::Server http;

  explicit Impl(LiveReport& report) : live(report), root(fs::canonical(report.dir()).string()) {}

  void page(const httplib::Request& req, httplib::Response& res) {
    const LiveReport::Page page = live.page();
    res.set_header("ETag", page.etag);
    res.set_header("Cache-Control", "no-cache");
    if (req.get_header_value("If-None-Match") == page.etag) {
      res.status = 304;
      return;
    }
    res.set_content(page.html, "text/html; charset=utf-8");
  }

  void table(const httplib::Request&, httplib::Response& res, bool runs) {
    const LiveReport::Page page = live.page();
    res.set_header("Cache-Control", "no-cache");
    res.set_content(runs ? page.runs_csv : page.curves_csv, "text/csv; charset=utf-8");
  }

  void file(const httplib::Request& req, httplib::Response& res) {
    const Resolved resolved = resolve_request_path(root, req.path);
    std::error_code ec;
    if (resolved.status == 200 && fs::file_size(resolved.file, ec) > kMaxFileBytes) {
      res.status = 403;
      res.set_content("normlab serve: files over 64 MiB are not served\n", "text/plain");
      return;
    }
    if (resolved.status != 200) {
      res.status = resolved.status;
      res.set_content(resolved.status == 403 ? "normlab serve: outside the served directory\n"
                                             : "normlab serve: no such file\n",
                      "text/plain");
      return;
    }
    std::ifstream in(resolved.file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    res.set_header("Cache-Control", "no-cache");
    res.set_content(bytes.str(), content_type(resolved.file).c_str());
  }
};

Server::Server(LiveReport& live) : impl_(std::make_unique<Impl>(live)) {
  Impl& s = *impl_;
  s.http.Get("/", [&s](const httplib::Request& req, httplib::Response& res) { s.page(req, res); });
  s.http.Get("/index.html", [&s](const httplib::Request& req, httplib::Response& res) { s.page(req, res); });
  s.http.Get("/runs.csv", [&s](const httplib::Request& req, httplib::Response& res) { s.table(req, res, true); });
  s.http.Get("/curves.csv", [&s](const httplib::Request& req, httplib::Response& res) { s.table(req, res, false); });
  s.http.Get(R"(/.*)", [&s](const httplib::Request& req, httplib::Response& res) { s.file(req, res); });
  s.http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content("normlab serve: internal error: " + what + "\n", "text/plain");
  });
  s.http.set_read_timeout(5);
  s.http.set_write_timeout(5);
}

Server::~Server() = default;

int Server::bind(const std::string& address, int port) {
  unsigned char buffer[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, address.c_str(), buffer) != 1 && ::inet_pton(AF_INET6, address.c_str(), buffer) != 1)
    throw InputError(fmt::format("--bind {}: not an IP address (e.g. 127.0.0.1, ::1)", address));
  if (port < 0 || port > 65535) throw InputError(fmt::format("--port {}: must be in 0..65535 (0: any free port)", port));
  const int bound = port == 0 ? impl_->http.bind_to_any_port(address) : (impl_->http.bind_to_port(address, port) ? port : -1);
  if (bound < 0 && port == 0)
    throw InputError(fmt::format("--bind {}: cannot listen there: not an address of this machine", address));
  if (bound < 0)
    throw InputError(fmt::format("cannot listen on {}:{}: the port is in use or the address is not this machine's; "
                                 "choose another --port (0 picks a free one)",
                                 address, port));
  return bound;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() { impl_->http.stop(); }

}  // namespace normlab::serve
