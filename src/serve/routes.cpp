// What each path answers: the page (with its own CSP, by hash), the live tables, report.md, the
// page's data under /_serve/, and any other path a file beneath DIR (files.cpp); and the screen
// every request passes first: GET and HEAD only, the Host, one range at most.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "normlab/serve/page.hpp"
#include "server_parts.hpp"

namespace normlab::serve {

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

bool is_file_route(const std::string& path) {
  return !(path == "/" || path == "/index.html" || path == "/runs.csv" || path == "/curves.csv" ||
           path == "/report.md" || path.rfind("/_serve/", 0) == 0);
}

// The ETag and no-cache headers of a response, and a 304 (true) when the client already has `etag`.
bool not_modified(const httplib::Request& req, httplib::Response& res, const std::string& etag) {
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  if (req.get_header_value("If-None-Match") != etag) return false;
  res.status = 304;
  return true;
}

}  // namespace

void Server::Impl::routes() {
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

// Before any route: the method, the Host, the number of ranges. Refusals close the connection
// (a refused request's body, if any, is never read).
httplib::Server::HandlerResponse Server::Impl::screen(const httplib::Request& req, httplib::Response& res) {
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

std::string Server::Impl::csp_of(const LiveReport::Page& page) {
  const std::lock_guard<std::mutex> guard(csp_mutex);
  if (csp_etag != page.etag) csp = page_csp(page.html), csp_etag = page.etag;
  return csp;
}

void Server::Impl::page(const httplib::Request& req, httplib::Response& res) {
  const LiveReport::Page page = live.page();
  res.headers.erase("Content-Security-Policy");  // the default one; the page's own follows
  res.set_header("Content-Security-Policy", csp_of(page));
  if (!not_modified(req, res, page.etag)) res.set_content(page.html, "text/html; charset=utf-8");
}

void Server::Impl::table(const httplib::Request&, httplib::Response& res, bool runs) {
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
void Server::Impl::markdown(const httplib::Request&, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_content(live.page().report_md, "text/plain; charset=utf-8");
}

// What the page's script polls: a 304 while the page's ETag is the one it has.
void Server::Impl::status(const httplib::Request& req, httplib::Response& res) {
  const LiveReport::Page page = live.latest();
  const std::string etag = page.etag.substr(0, page.etag.size() - 1) + "-status\"";
  if (!not_modified(req, res, etag)) res.set_content(page.status_json, "application/json");
}

// One run's series of one metric, downsampled; a 304 while its metrics.jsonl has not changed.
void Server::Impl::series(const httplib::Request& req, httplib::Response& res) {
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
void Server::Impl::chart_js(const httplib::Request&, httplib::Response& res) {
  if (chart_library().empty()) {
    res.status = 404;
    res.set_content("normlab serve: Chart.js is not installed (apt-get install libjs-chart.js)\n",
                    "text/plain; charset=utf-8");
    return;
  }
  res.set_header("Cache-Control", "max-age=3600");
  res.set_content(chart_library(), "text/javascript; charset=utf-8");
}

void Server::Impl::file(const httplib::Request& req, httplib::Response& res) {
  const int dir_fd = root();
  if (dir_fd < 0) {
    res.status = 404;
    res.set_content("normlab serve: the directory does not exist yet\n", "text/plain; charset=utf-8");
    return;
  }
  internal::serve_file(dir_fd, req, res);
}

}  // namespace normlab::serve
