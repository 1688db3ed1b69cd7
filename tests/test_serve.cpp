// `normlab serve`: a live report of a compare while it trains, loaded in headless Chromium (a
// chart gains points, the run table changes state, the finished page is report.html's); no file
// outside DIR is ever served; a torn last metrics line of a running run does not break the page;
// bad flags and a taken port are one line and exit 2.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "normlab/serve/server.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::Child;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

struct Response {
  int status = 0;
  std::string head, body;
};

// One request over a plain socket to 127.0.0.1, sent byte for byte as given (no client library
// normalizes the path on the way).
Response http_get(int port, const std::string& target, const std::string& method = "GET",
                  const std::string& header = "") {
  Response out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return out;
  }
  const std::string request =
      method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + header + "\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, size_t(n));
  ::close(fd);
  if (raw.rfind("HTTP/1.1 ", 0) == 0) out.status = std::atoi(raw.c_str() + 9);
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end != std::string::npos) out.head = raw.substr(0, head_end), out.body = raw.substr(head_end + 4);
  return out;
}

// Polls `done` every 100 ms for at most `seconds`.
bool wait_for(const std::function<bool()>& done, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// `normlab serve DIR --port 0` started; its port read from the URL it prints (0 if it never did).
struct ServeProcess {
  std::string out_path, err_path;
  Child child;
  int port = 0;
  ServeProcess(const TempDir& tmp, const std::string& dir, const std::string& name = "serve")
      : out_path(tmp.sub(name + ".out")), err_path(tmp.sub(name + ".err")),
        child({"serve", dir, "--port", "0"}, out_path, err_path) {
    static const std::regex url(R"(http://127\.0\.0\.1:(\d+)/)");
    wait_for(
        [&] {
          std::smatch m;
          const std::string printed = read_text(out_path);
          if (std::regex_search(printed, m, url)) port = std::stoi(m[1]);
          return port > 0;
        },
        30);
  }
};

// A process stopped with SIGSTOP, continued when released or at the end of scope.
struct Paused {
  pid_t pid = 0;
  void hold(pid_t p) {
    pid = p;
    ::kill(pid, SIGSTOP);
  }
  void release() {
    if (pid > 0) ::kill(pid, SIGCONT);
    pid = 0;
  }
  ~Paused() { release(); }
};

bool have_chromium() { return std::system("command -v chromium >/dev/null 2>&1") == 0; }

// The page as headless Chromium has it after running its scripts.
std::string chromium_dom(const TempDir& tmp, int port) {
  const std::string profile = tmp.sub("chromium-profile"), dom = tmp.sub("dom.html");
  const std::string cmd = fmt::format(
      "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync --user-data-dir={} "
      "--virtual-time-budget=3000 --dump-dom http://127.0.0.1:{}/ >{} 2>/dev/null",
      profile, port, dom);
  CHECK(std::system(cmd.c_str()) == 0);
  return read_text(dom);
}

// The state of every row of the run table, in order.
std::vector<std::string> run_states(const std::string& html) {
  static const std::regex state(R"re(data-state="([a-z]+)")re");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), state); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1]);
  return out;
}

// Points on the lines of the "Training loss" section's charts.
size_t training_loss_points(const std::string& html) {
  const size_t start = html.find("<h2>Training loss");
  if (start == std::string::npos) return 0;
  const size_t end = html.find("<h2>", start + 1);
  const std::string section = html.substr(start, end - start);
  static const std::regex path(R"re(<path d="([^"]*)")re");
  size_t points = 0;
  for (auto it = std::sregex_iterator(section.begin(), section.end(), path); it != std::sregex_iterator(); ++it) {
    const std::string d = (*it)[1];
    points += size_t(std::count(d.begin(), d.end(), 'M') + std::count(d.begin(), d.end(), 'L'));
  }
  return points;
}

// The page without what serve adds to report.html: its style, run table and update script.
std::string without_serve_parts(std::string html) {
  for (const auto& [open, close] : {std::pair{"<style id=\"serve-style\">", "</style>\n"},
                                    std::pair{"<section id=\"serve-status\">", "</section>\n"},
                                    std::pair{"<script id=\"serve-live\">", "</script>\n"}}) {
    const size_t a = html.find(open);
    if (a == std::string::npos) continue;
    const size_t b = html.find(close, a);
    if (b != std::string::npos) html.erase(a, b + std::string(close).size() - a);
  }
  return html;
}

// A run of a few seconds (400 steps of this model), so that a look from the browser catches it running.
const char* kBase = R"({
  "model": {"d_model": 64, "heads": 4, "layers": 2, "ffn": 256, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": STEPS, "batch_size": 32, "eval_every": 20, "log_every": 20, "diagnostics_every": 10,
            "checkpoint_every": 1000, "threads": 1}
})";

std::string base_config(int steps) { return std::regex_replace(kBase, std::regex("STEPS"), std::to_string(steps)); }

}  // namespace

TEST_CASE("serve: a compare in progress in headless Chromium - a chart gains points, the run table changes state, "
          "the finished page is report.html's") {
  if (!have_chromium()) {
    MESSAGE("chromium is not installed: skipping serve's browser test (apt-get install chromium; scripts/test.sh does)");
    return;
  }
  TempDir tmp("normlab_serve_live");
  tmp.write("base.json", base_config(400));
  const std::string config =
      tmp.write("compare.json", R"({"base": "base.json", "grid": {"variants": ["none", "pre-ln"], "seeds": [0, 1]}})");
  const std::string out = tmp.sub("out");
  Child compare({"compare", "--config", config, "--out", out, "--jobs", "1"}, tmp.sub("compare.out"),
                tmp.sub("compare.err"));
  // If a check below gives up early: compare stops its runs (they are in their own process groups).
  struct StopCompare {
    Child& compare;
    bool done = false;
    ~StopCompare() {
      if (done) return;
      compare.signal(SIGTERM);
      compare.wait(std::chrono::seconds(60));
    }
  } stop_compare{compare};
  REQUIRE(wait_for([&] { return fs::is_directory(out + "/runs"); }, 60));
  ServeProcess serve(tmp, out);
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));

  // First look: a run has written a few steps, and its trainer is held there (SIGSTOP, its pid from
  // its lock file) until the browser has looked, however fast the machine trains.
  auto lines_of = [](const fs::path& file) {
    const std::string text = read_text(file.string());
    return std::count(text.begin(), text.end(), '\n');
  };
  Paused paused;
  REQUIRE(wait_for(
      [&] {
        std::error_code ec;
        for (const auto& run : fs::directory_iterator(out + "/runs", ec)) {
          const pid_t pid = std::atoi(read_text((run.path() / ".normlab.lock").string()).c_str());
          if (pid <= 0 || lines_of(run.path() / "metrics.jsonl") < 30 || fs::exists(run.path() / "summary.json"))
            continue;
          paused.hold(pid);
          if (!fs::exists(run.path() / "summary.json")) return true;
          paused.release();
        }
        return false;
      },
      120));
  const std::string first = chromium_dom(tmp, serve.port);
  const std::vector<std::string> first_states = run_states(first);
  const size_t first_points = training_loss_points(first);
  INFO("first load's run states: ", fmt::format("{}", fmt::join(first_states, ", ")));
  CHECK(first_states.size() == 4);
  CHECK(std::count(first_states.begin(), first_states.end(), "finished") < 4);
  CHECK(std::count(first_states.begin(), first_states.end(), "queued") >= 1);
  CHECK(first_points > 0);
  CHECK(first.find("data-serve-polls=\"") != std::string::npos);  // the update script asked, and got its answer
  paused.release();

  // Second look: every run finished.
  const int compare_code = compare.wait(std::chrono::seconds(600));
  stop_compare.done = true;
  REQUIRE(compare_code == 0);
  const std::string second = chromium_dom(tmp, serve.port);
  const std::vector<std::string> second_states = run_states(second);
  CHECK(second_states == std::vector<std::string>(4, "finished"));
  CHECK(second_states != first_states);
  CHECK(training_loss_points(second) > first_points);
  CHECK(second.find("data-serve-polls=\"") != std::string::npos);

  // The finished study's page is the report `normlab report` draws, plus serve's own parts.
  REQUIRE(normlab::test::run_normlab({"report", out, "--out", tmp.sub("report")}, tmp.sub("report.out"),
                                     tmp.sub("report.err")) == 0);
  const Response page = http_get(serve.port, "/");
  CHECK(page.status == 200);
  CHECK(page.body.find("id=\"serve-status\"") != std::string::npos);
  CHECK(without_serve_parts(page.body) == read_text(tmp.sub("report") + "/report.html"));
  CHECK(http_get(serve.port, "/runs.csv").body == read_text(tmp.sub("report") + "/runs.csv"));

  serve.child.signal(SIGTERM);
  CHECK(serve.child.wait(std::chrono::seconds(10)) == 0);
}

TEST_CASE("serve: nothing outside DIR is served - .., %2e%2e, absolute paths, links leading out - nothing is written") {
  TempDir tmp("normlab_serve_paths");
  const fs::path dir = tmp.path / "served";
  fs::create_directories(dir / "run1");
  std::ofstream(dir / "run1" / "metrics.jsonl") << R"({"step":1,"loss":2.5,"accuracy":0.1,"grad_norm":1.0})" << "\n";
  std::ofstream(dir / "run1" / ".normlab.lock") << "12345\n";
  tmp.write("secret.txt", "TOPSECRET\n");
  fs::create_symlink(tmp.path / "secret.txt", dir / "link.txt");
  fs::create_symlink(tmp.path, dir / "linkdir");
  fs::create_symlink("run1/metrics.jsonl", dir / "inner-link.jsonl");
  auto snapshot = [&] {
    std::string listing;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      listing += e.path().string() + (e.is_symlink() ? "" : ":" + std::to_string(fs::last_write_time(e.path()).time_since_epoch().count())) + "\n";
    return listing;
  };
  const std::string before = snapshot();

  // The library's check, case by case.
  const std::string root = fs::canonical(dir).string();
  CHECK(normlab::serve::resolve_request_path(root, "/run1/metrics.jsonl").status == 200);
  CHECK(normlab::serve::resolve_request_path(root, "/inner-link.jsonl").status == 200);
  CHECK(normlab::serve::resolve_request_path(root, "/../secret.txt").status == 403);
  CHECK(normlab::serve::resolve_request_path(root, "/run1/../../secret.txt").status == 403);
  CHECK(normlab::serve::resolve_request_path(root, "/link.txt").status == 403);
  CHECK(normlab::serve::resolve_request_path(root, "/linkdir/secret.txt").status == 403);
  CHECK(normlab::serve::resolve_request_path(root, "/" + (tmp.path / "secret.txt").string()).status == 404);
  CHECK(normlab::serve::resolve_request_path(root, "/run1/.normlab.lock").status == 404);
  CHECK(normlab::serve::resolve_request_path(root, "/run1").status == 404);
  CHECK(normlab::serve::resolve_request_path(root, std::string("/run1/metrics.jsonl\0x", 22)).status == 403);

  // And over HTTP, byte for byte as a client could send them.
  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const Response ok = http_get(serve.port, "/run1/metrics.jsonl");
  CHECK(ok.status == 200);
  CHECK(ok.body.find("\"loss\":2.5") != std::string::npos);
  for (const std::string& target : std::vector<std::string>{"/../secret.txt", "/run1/../../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt",
        "/run1/%2e%2e/%2e%2e/secret.txt", "/..%2fsecret.txt", "/%2e%2e%2fsecret.txt", "/link.txt", "/linkdir/secret.txt",
        "//" + (tmp.path / "secret.txt").string(), "/" + (tmp.path / "secret.txt").string(), "/run1/.normlab.lock"}) {
    const Response r = http_get(serve.port, target);
    INFO("GET ", target, " -> ", r.status);
    CHECK(r.status >= 400);
    CHECK(r.body.find("TOPSECRET") == std::string::npos);
  }
  CHECK(http_get(serve.port, "/run1/metrics.jsonl", "PUT").status >= 400);
  CHECK(http_get(serve.port, "/").status == 200);
  CHECK(snapshot() == before);
  serve.child.signal(SIGINT);
  CHECK(serve.child.wait(std::chrono::seconds(10)) == 0);
}

TEST_CASE("serve: a running run's torn last line does not break the page - running, stopped, diverged, finished") {
  TempDir tmp("normlab_serve_torn");
  const fs::path dir = tmp.path / "runs";
  tmp.write("base.json", base_config(40));
  REQUIRE(normlab::test::run_normlab({"train", "--config", tmp.sub("base.json"), "--out", (dir / "done").string()},
                                     tmp.sub("train.out"), tmp.sub("train.err")) == 0);
  // A second run, caught mid-write: its trainer (this test) holds the lock, its last line is torn.
  fs::create_directories(dir / "live");
  fs::copy_file(dir / "done" / "config.json", dir / "live" / "config.json");
  std::string metrics;
  {
    std::ifstream in(dir / "done" / "metrics.jsonl");
    std::string line;
    for (int i = 0; i < 12 && std::getline(in, line); ++i) metrics += line + "\n";
  }
  std::ofstream(dir / "live" / "metrics.jsonl") << metrics << R"({"step":13,"accuracy":0.2,"grad_no)";
  // And one that diverged at step 5.
  fs::create_directories(dir / "blown");
  fs::copy_file(dir / "done" / "config.json", dir / "blown" / "config.json");
  std::ofstream(dir / "blown" / "metrics.jsonl") << metrics.substr(0, metrics.find(R"({"step":5,)"))
                                                 << R"({"step":5,"loss":null,"grad_norm":null,"diverged":true})" << "\n";
  std::ofstream(dir / "blown" / "summary.json") << R"({"diverged": true, "diverged_at_step": 5, "wall_time_s": 0.1})";
  const int lock = ::open((dir / "live" / ".normlab.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(lock >= 0);
  REQUIRE(::flock(lock, LOCK_EX | LOCK_NB) == 0);

  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const Response live = http_get(serve.port, "/");
  CHECK(live.status == 200);
  CHECK(run_states(live.body) == std::vector<std::string>{"diverged", "finished", "running"});
  CHECK(live.body.find("<td>12 / 40</td>") != std::string::npos);  // the last whole line's step
  CHECK(live.body.find("<h2>Answer</h2>") != std::string::npos);
  // Unchanged since the page's ETag: 304, nothing drawn again.
  std::smatch etag;
  REQUIRE(std::regex_search(live.head, etag, std::regex("ETag: (\"[0-9a-f]+\")")));
  CHECK(http_get(serve.port, "/", "GET", "If-None-Match: " + etag[1].str() + "\r\n").status == 304);
  CHECK(http_get(serve.port, "/", "HEAD").status == 200);
  CHECK(http_get(serve.port, "/curves.csv").body.find("live,") != std::string::npos);
  // serve holds no lock: the finished run's trainer could take its lock back right now.
  const int other = ::open((dir / "done" / ".normlab.lock").c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(other >= 0);
  CHECK(::flock(other, LOCK_EX | LOCK_NB) == 0);
  ::close(other);

  // The trainer dies: the run is stopped, and the torn line is still skipped.
  ::close(lock);
  Response stopped;
  CHECK(wait_for(
      [&] {
        stopped = http_get(serve.port, "/");
        return run_states(stopped.body) == std::vector<std::string>{"diverged", "finished", "stopped"};
      },
      10));
  CHECK(stopped.status == 200);
  serve.child.signal(SIGTERM);
  CHECK(serve.child.wait(std::chrono::seconds(10)) == 0);

  // One run directory alone is a DIR too.
  ServeProcess one(tmp, (dir / "done").string(), "one");
  REQUIRE_MESSAGE(one.port > 0, read_text(one.err_path));
  const Response single = http_get(one.port, "/");
  CHECK(single.status == 200);
  CHECK(run_states(single.body) == std::vector<std::string>{"finished"});
  CHECK(single.body.find("<h2>Answer</h2>") != std::string::npos);
}

TEST_CASE("serve: a bad directory, flag or port is one line and exit 2") {
  TempDir tmp("normlab_serve_cli");
  tmp.write("file.txt", "x");
  fs::create_directories(tmp.path / "empty");
  auto run = [&](const std::vector<std::string>& args) {
    fs::remove(tmp.sub("err"));
    const int code = normlab::test::run_normlab(args, tmp.sub("out"), tmp.sub("err"));
    const std::string err = read_text(tmp.sub("err"));
    INFO("normlab ", fmt::format("{}", fmt::join(args, " ")), ": ", err);
    CHECK(code == 2);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    return err;
  };
  CHECK(run({"serve", tmp.sub("missing")}).find("no such directory") != std::string::npos);
  CHECK(run({"serve", tmp.sub("file.txt")}).find("not a directory") != std::string::npos);
  CHECK(run({"serve", tmp.sub("empty")}).find("not a run directory") != std::string::npos);
  fs::create_directories(tmp.path / "runs" / "a");
  std::ofstream(tmp.path / "runs" / "a" / "metrics.jsonl") << "";
  run({"serve", tmp.sub("runs"), "--port", "http"});
  run({"serve", tmp.sub("runs"), "--port", "70000"});
  CHECK(run({"serve", tmp.sub("runs"), "--bind", "localhost.invalid"}).find("not an IP address") != std::string::npos);

  // A port someone else listens on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  CHECK(run({"serve", tmp.sub("runs"), "--port", port}).find("in use") != std::string::npos);
  ::close(fd);
}
