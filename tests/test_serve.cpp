// `normlab serve`: a live report of a compare while it trains, loaded in headless Chromium (a
// chart gains points, the run table changes state, the page speaks compare's names and judges no
// unfinished run, the finished page says what compare's report.html says); no file
// outside DIR is ever served, also while a file is swapped for a link; a torn last metrics line of a
// running run does not break the page; an unreadable or malformed run is its own row; bad flags and
// a taken port are one line and exit 2. The server's hardening: an exclusive port, slow clients,
// ranges, the Host check, methods, security headers and CSP. And runs.csv / curves.csv as Python's
// csv module reads them.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
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

// A connected TCP socket to 127.0.0.1:port (-1 if the connection failed), reads timing out after
// `timeout_s`.
int connect_loopback(int port, int timeout_s = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  timeval timeout{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// One request over a plain socket to 127.0.0.1, sent byte for byte as given (no client library
// normalizes the path on the way). `header` lines end in \r\n; "Host: 127.0.0.1" is added unless
// `header` has a Host line of its own.
Response http_get(int port, const std::string& target, const std::string& method = "GET",
                  const std::string& header = "") {
  Response out;
  const int fd = connect_loopback(port);
  if (fd < 0) return out;
  const bool own_host = header.rfind("Host:", 0) == 0 || header.find("\r\nHost:") != std::string::npos;
  const std::string request = method + " " + target + " HTTP/1.1\r\n" + (own_host ? "" : "Host: 127.0.0.1\r\n") +
                              "Connection: close\r\n" + header + "\r\n";
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
  ServeProcess(const TempDir& tmp, const std::string& dir, const std::string& name = "serve",
               const std::function<void()>& before_exec = {})
      : out_path(tmp.sub(name + ".out")), err_path(tmp.sub(name + ".err")),
        child({"serve", dir, "--port", "0"}, out_path, err_path, before_exec) {
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

// Points of every run's training-loss series, as the page's charts fetch them.
size_t training_loss_points(int port) {
  const nlohmann::json status = nlohmann::json::parse(http_get(port, "/_serve/status.json").body, nullptr, false);
  size_t points = 0;
  if (!status.is_object()) return 0;
  for (const auto& run : status["runs"]) {
    const Response r =
        http_get(port, "/_serve/series.json?run=" + run["name"].get<std::string>() + "&metric=train/loss");
    const nlohmann::json series = nlohmann::json::parse(r.body, nullptr, false);
    if (series.is_object() && series["metrics"].contains("train/loss"))
      points += series["metrics"]["train/loss"]["step"].size();
  }
  return points;
}

// The report's text on a page: its title and setup line, then every section up to the first one
// the live page draws as interactive charts (the validation curves).
std::string report_text(const std::string& html) {
  const size_t start = html.find("<h1>"), answer = html.find("<h2>Answer</h2>"),
               end = html.find("<h2>Validation curves");
  if (start == std::string::npos || answer == std::string::npos || end == std::string::npos) return "";
  std::string text = html.substr(answer, end - answer);
  // A finished study's live page shows its runs and charts after the first screen: not report text.
  const size_t runs = text.find("<section id=\"serve-status\">"), report = text.find("<div id=\"serve-report\">\n");
  if (runs != std::string::npos && report != std::string::npos) text.erase(runs, report + 24 - runs);
  return html.substr(start, html.find("</p>", start) - start) + text;
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

TEST_CASE(
    "serve: a compare in progress in headless Chromium - a chart gains points, the run table changes state, "
    "compare's names and an Answer that waits - the finished page says what compare's report.html says") {
  if (!have_chromium()) {
    MESSAGE(
        "chromium is not installed: skipping serve's browser test (apt-get install chromium; scripts/test.sh does)");
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
  const size_t first_points = training_loss_points(serve.port);
  INFO("first load's run states: ", fmt::format("{}", fmt::join(first_states, ", ")));
  CHECK(first_states.size() == 4);
  CHECK(std::count(first_states.begin(), first_states.end(), "finished") < 4);
  CHECK(std::count(first_states.begin(), first_states.end(), "queued") >= 1);
  CHECK(first_points > 0);
  CHECK(first.find("data-serve-polls=\"") != std::string::npos);  // the update script asked, and got its answer
  // compare's names and words: its title, Grid line and variants; an Answer that judges no
  // unfinished run; the thread count known before summary.json says it.
  CHECK(first.find("<h1>normlab compare report</h1>") != std::string::npos);
  CHECK(first.find("Grid: 2 variants × 1 learning rates × 2 seeds") != std::string::npos);
  CHECK(first.find("model.norm=") == std::string::npos);
  CHECK((first.find("Not yet judged: ") != std::string::npos ||
         first.find("No run has finished yet") != std::string::npos));
  CHECK(first.find("used ? thread") == std::string::npos);
  paused.release();

  // Second look: every run finished.
  const int compare_code = compare.wait(std::chrono::seconds(600));
  stop_compare.done = true;
  REQUIRE(compare_code == 0);
  const std::string second = chromium_dom(tmp, serve.port);
  const std::vector<std::string> second_states = run_states(second);
  CHECK(second_states == std::vector<std::string>(4, "finished"));
  CHECK(second_states != first_states);
  CHECK(training_loss_points(serve.port) > first_points);
  CHECK(second.find("data-serve-polls=\"") != std::string::npos);

  // The finished study's page says what compare's report.html says, in the same words.
  const Response page = http_get(serve.port, "/");
  CHECK(page.status == 200);
  CHECK(page.body.find("id=\"serve-status\"") != std::string::npos);
  // Every run judged: the page opens on the report's first screen, the runs and charts below it.
  CHECK(page.body.find("<section id=\"answer\" class=\"lead\">") < page.body.find("id=\"serve-status\""));
  const std::string compare_report = read_text(out + "/report.html");
  CHECK(!report_text(compare_report).empty());
  CHECK(report_text(page.body) == report_text(compare_report));
  CHECK(http_get(serve.port, "/runs.csv").body == read_text(out + "/runs.csv"));
  // Every link of the footer answers.
  for (const std::string target : {"/runs.csv", "/curves.csv", "/report.md"}) {
    INFO(target);
    CHECK(page.body.find("href=\"" + target.substr(1) + "\"") != std::string::npos);
    CHECK(http_get(serve.port, target).status == 200);
  }
  CHECK(http_get(serve.port, "/report.md").body.rfind("# normlab compare report", 0) == 0);

  serve.child.signal(SIGTERM);
  CHECK(serve.child.wait(std::chrono::seconds(10)) == 0);
}

TEST_CASE("serve: nothing outside DIR is served - .., %2e%2e, absolute paths, links leading out - nothing is written") {
  TempDir tmp("normlab_serve_paths");
  const fs::path dir = tmp.path / "served";
  fs::create_directories(dir / "run1");
  std::ofstream(dir / "run1" / "metrics.jsonl") << R"({"step":1,"loss":2.5,"accuracy":0.1,"grad_norm":1.0})"
                                                << "\n";
  std::ofstream(dir / "run1" / ".normlab.lock") << "12345\n";
  tmp.write("secret.txt", "TOPSECRET\n");
  fs::create_symlink(tmp.path / "secret.txt", dir / "link.txt");
  fs::create_symlink(tmp.path, dir / "linkdir");
  fs::create_symlink("run1/metrics.jsonl", dir / "inner-link.jsonl");
  auto snapshot = [&] {
    std::string listing;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      listing +=
          e.path().string() +
          (e.is_symlink() ? "" : ":" + std::to_string(fs::last_write_time(e.path()).time_since_epoch().count())) + "\n";
    return listing;
  };
  const std::string before = snapshot();

  // The library's check, case by case.
  const int root = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(root >= 0);
  auto status = [&](const std::string& path) { return normlab::serve::open_request_path(root, path).status; };
  CHECK(status("/run1/metrics.jsonl") == 200);
  CHECK(status("/inner-link.jsonl") == 200);
  CHECK(status("/../secret.txt") == 403);
  CHECK(status("/run1/../../secret.txt") == 403);
  CHECK(status("/run1/../run1/metrics.jsonl") == 403);  // a ".." that stays inside is refused too
  CHECK(status("/run1/./metrics.jsonl") == 404);
  CHECK(status("/link.txt") == 403);
  CHECK(status("/linkdir/secret.txt") == 403);
  CHECK(status("/" + (tmp.path / "secret.txt").string()) == 404);
  CHECK(status("/run1/.normlab.lock") == 404);
  CHECK(status("/run1") == 404);
  CHECK(status(std::string("/run1/metrics.jsonl\0x", 22)) == 400);
  ::close(root);

  // And over HTTP, byte for byte as a client could send them.
  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const Response ok = http_get(serve.port, "/run1/metrics.jsonl");
  CHECK(ok.status == 200);
  CHECK(ok.body.find("\"loss\":2.5") != std::string::npos);
  for (const std::string& target :
       std::vector<std::string>{"/../secret.txt", "/run1/../../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt",
                                "/run1/%2e%2e/%2e%2e/secret.txt", "/..%2fsecret.txt", "/%2e%2e%2fsecret.txt",
                                "/link.txt", "/linkdir/secret.txt", "//" + (tmp.path / "secret.txt").string(),
                                "/" + (tmp.path / "secret.txt").string(), "/run1/.normlab.lock"}) {
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
                                                 << R"({"step":5,"loss":null,"grad_norm":null,"diverged":true})"
                                                 << "\n";
  std::ofstream(dir / "blown" / "summary.json") << R"({"diverged": true, "diverged_at_step": 5, "wall_time_s": 0.1})";
  const int lock = ::open((dir / "live" / ".normlab.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(lock >= 0);
  REQUIRE(::flock(lock, LOCK_EX | LOCK_NB) == 0);

  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const Response live = http_get(serve.port, "/");
  CHECK(live.status == 200);
  CHECK(run_states(live.body) == std::vector<std::string>{"running", "diverged", "finished"});  // running first
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
        return run_states(stopped.body) == std::vector<std::string>{"stopped", "diverged", "finished"};
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

namespace {

// A run directory with a one-line metrics.jsonl: enough for serve to list it.
void write_small_run(const fs::path& run) {
  fs::create_directories(run);
  std::ofstream(run / "metrics.jsonl") << R"({"step":1,"loss":2.5,"accuracy":0.1,"grad_norm":1.0})"
                                       << "\n";
}

// `name: value` of a response head ("" when absent).
std::string header_of(const Response& r, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(r.head, m, std::regex("\r\n" + name + ": ([^\r\n]*)", std::regex::icase))) return "";
  return m[1];
}

// Runs a child as `nobody` when the tests run as root (root reads files whatever their mode, so a
// chmod 000 would test nothing); as anyone else, unchanged.
std::function<void()> as_unprivileged() {
  uid_t uid = 0;
  gid_t gid = 0;
  if (::geteuid() == 0) {
    const passwd* nobody = ::getpwnam("nobody");
    REQUIRE_MESSAGE(nobody != nullptr, "no 'nobody' user to drop root privileges to");
    uid = nobody->pw_uid, gid = nobody->pw_gid;
  }
  return [uid, gid] {
    if (uid != 0 && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)) ::_exit(126);
  };
}

}  // namespace

TEST_CASE("serve: a second server on a taken port exits 2 and the first keeps serving its own DIR") {
  TempDir tmp("normlab_serve_exclusive");
  write_small_run(tmp.path / "first" / "alpha_run");
  write_small_run(tmp.path / "second" / "beta_run");
  ServeProcess first(tmp, tmp.sub("first"), "first");
  REQUIRE_MESSAGE(first.port > 0, read_text(first.err_path));
  Child second({"serve", tmp.sub("second"), "--port", std::to_string(first.port)}, tmp.sub("second.out"),
               tmp.sub("second.err"));
  CHECK(second.wait(std::chrono::seconds(20)) == 2);
  const std::string err = read_text(tmp.sub("second.err"));
  INFO(err);
  CHECK(err.find("in use") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  for (int i = 0; i < 20; ++i) {  // with a shared port, about half would reach the second server
    const Response page = http_get(first.port, "/");
    CHECK(page.status == 200);
    CHECK(page.body.find("alpha_run") != std::string::npos);
    CHECK(page.body.find("beta_run") == std::string::npos);
  }
}

TEST_CASE("serve: 100 slow clients and 8 idle keep-alive ones do not delay a normal request, a silent one is dropped") {
  TempDir tmp("normlab_serve_slow");
  write_small_run(tmp.path / "runs" / "run1");
  ServeProcess serve(tmp, tmp.sub("runs"));
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  // All of it well within the read timeout (5 s): no slow client can have been dropped to make room.
  const auto setup_start = std::chrono::steady_clock::now();
  std::vector<int> slow, idle;
  for (int i = 0; i < 100; ++i) {  // half a request, then nothing
    const int fd = connect_loopback(serve.port);
    REQUIRE(fd >= 0);
    const std::string half = "GET /run1/metrics.jsonl HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    ::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  for (int i = 0; i < 8; ++i) {  // a whole request kept alive, as a polling browser tab does
    const int fd = connect_loopback(serve.port);
    REQUIRE(fd >= 0);
    const std::string request = "GET /run1/metrics.jsonl HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buffer[4096];
    CHECK(::recv(fd, buffer, sizeof buffer, 0) > 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const std::string target : {"/run1/metrics.jsonl", "/"}) {
    const auto start = std::chrono::steady_clock::now();
    const Response r = http_get(serve.port, target);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO("GET ", target, ": ", seconds, " s");
    CHECK(r.status == 200);
    CHECK(seconds < 1.0);
  }
  CHECK(std::chrono::steady_clock::now() - setup_start < std::chrono::seconds(4));
  // A client that stays silent mid-request is dropped after the read timeout (5 s), not kept.
  char byte;
  const auto start = std::chrono::steady_clock::now();
  const ssize_t got = ::recv(slow[0], &byte, 1, 0);  // 0 (closed) or an error answer; -1: still open after 10 s
  CHECK(got >= 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(9));
  for (int fd : slow) ::close(fd);
  for (int fd : idle) ::close(fd);
}

TEST_CASE("serve: one range at most, never more bytes than the file") {
  TempDir tmp("normlab_serve_ranges");
  write_small_run(tmp.path / "runs" / "run1");
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char('a' + i % 26);
  std::ofstream(tmp.path / "runs" / "run1" / "big.log", std::ios::binary) << data;
  ServeProcess serve(tmp, tmp.sub("runs"));
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  std::string many = "bytes=0-0";
  for (int i = 1; i < 1500; ++i) many += ",0-0";
  for (const std::string& ranges : {std::string("bytes=0-,0-,0-,0-"), std::string("bytes=0-9,20-29"), many}) {
    const Response r = http_get(serve.port, "/run1/big.log", "GET", "Range: " + ranges + "\r\n");
    INFO("Range: ", ranges.substr(0, 40), " -> ", r.status, ", ", r.body.size(), " bytes");
    CHECK(r.status >= 400);
    CHECK(r.body.size() <= data.size());
    CHECK(r.body.find("abcdefghij") == std::string::npos);
  }
  const Response page = http_get(serve.port, "/", "GET", "Range: bytes=0-,0-\r\n");
  CHECK(page.status == 416);
  const Response whole = http_get(serve.port, "/run1/big.log", "GET", "Range: bytes=0-\r\n");
  CHECK(whole.status == 206);
  CHECK(whole.body == data);
  const Response part = http_get(serve.port, "/run1/big.log", "GET", "Range: bytes=100-199\r\n");
  CHECK(part.status == 206);
  CHECK(part.body == data.substr(100, 100));
  const Response past = http_get(serve.port, "/run1/big.log", "GET", "Range: bytes=1000-99999999\r\n");
  CHECK(past.body.size() <= data.size());
  CHECK(past.body == data.substr(1000));
}

TEST_CASE("serve: the Host header must name this server - DNS rebinding is refused") {
  using normlab::serve::host_allowed;
  CHECK(host_allowed("127.0.0.1", "127.0.0.1"));
  CHECK(host_allowed("127.0.0.1:8000", "127.0.0.1"));
  CHECK(host_allowed("localhost", "127.0.0.1"));
  CHECK(host_allowed("LocalHost:9000", "127.0.0.1"));  // a tunnel's local port
  CHECK(host_allowed("[::1]:8000", "::1"));
  CHECK(host_allowed("10.1.2.3:8000", "0.0.0.0"));
  CHECK(host_allowed("[fe80::1]", "::"));
  CHECK_FALSE(host_allowed("10.1.2.3", "127.0.0.1"));
  CHECK_FALSE(host_allowed("[::1]", "127.0.0.1"));
  CHECK_FALSE(host_allowed("attacker.example", "127.0.0.1"));
  CHECK_FALSE(host_allowed("attacker.example", "0.0.0.0"));
  CHECK_FALSE(host_allowed("127.0.0.1.nip.io", "127.0.0.1"));
  CHECK_FALSE(host_allowed("localhost.attacker.example:8000", "127.0.0.1"));
  CHECK_FALSE(host_allowed("localhost:80x", "127.0.0.1"));
  CHECK_FALSE(host_allowed("", "127.0.0.1"));

  TempDir tmp("normlab_serve_host");
  write_small_run(tmp.path / "runs" / "run1");
  ServeProcess serve(tmp, tmp.sub("runs"));
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const std::string port = std::to_string(serve.port);
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + port, "localhost:" + port, "localhost"})
    CHECK(http_get(serve.port, "/run1/metrics.jsonl", "GET", "Host: " + host + "\r\n").status == 200);
  for (const std::string& host :
       std::vector<std::string>{"rebind.attacker.example:" + port, "127.0.0.1.nip.io:" + port, "10.0.0.1"}) {
    const Response r = http_get(serve.port, "/run1/metrics.jsonl", "GET", "Host: " + host + "\r\n");
    INFO("Host: ", host);
    CHECK(r.status == 403);
    CHECK(r.body.find("\"loss\"") == std::string::npos);
    CHECK(http_get(serve.port, "/", "GET", "Host: " + host + "\r\n").status == 403);
  }
}

TEST_CASE("serve: GET and HEAD only (405), nosniff, a strict CSP and a sandbox for DIR's own files") {
  TempDir tmp("normlab_serve_headers");
  write_small_run(tmp.path / "runs" / "run1");
  std::ofstream(tmp.path / "runs" / "run1" / "evil.html") << "<title>x</title><script>document.title='RAN'</script>";
  ServeProcess serve(tmp, tmp.sub("runs"));
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  for (const std::string method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
    const Response r = http_get(serve.port, "/run1/metrics.jsonl", method, "Content-Length: 0\r\n");
    INFO(method);
    CHECK(r.status == 405);
    CHECK(header_of(r, "Allow") == "GET, HEAD");
  }
  const Response head = http_get(serve.port, "/run1/metrics.jsonl", "HEAD");
  CHECK(head.status == 200);
  CHECK(head.body.empty());

  const Response page = http_get(serve.port, "/");
  CHECK(header_of(page, "X-Content-Type-Options") == "nosniff");
  const std::string csp = header_of(page, "Content-Security-Policy");
  INFO("page CSP: ", csp);
  CHECK(csp.rfind("default-src 'none'; script-src 'sha256-", 0) == 0);
  CHECK(csp.find("'unsafe-inline'") == std::string::npos);
  CHECK(csp.find("style-src 'sha256-") != std::string::npos);
  for (const std::string target : {"/run1/evil.html", "/run1/metrics.jsonl", "/run1/missing.txt", "/runs.csv"}) {
    const Response r = http_get(serve.port, target);
    INFO(target);
    CHECK(header_of(r, "X-Content-Type-Options") == "nosniff");
    CHECK(header_of(r, "Content-Security-Policy").rfind("sandbox; default-src 'none'", 0) == 0);
  }
}

TEST_CASE("serve: the page runs under its CSP in headless Chromium without a violation, an .html of DIR runs nothing") {
  if (!have_chromium()) {
    MESSAGE("chromium is not installed: skipping (apt-get install chromium; scripts/test.sh does)");
    return;
  }
  TempDir tmp("normlab_serve_csp");
  tmp.write("base.json", base_config(40));
  REQUIRE(normlab::test::run_normlab({"train", "--config", tmp.sub("base.json"), "--out", tmp.sub("runs/done")},
                                     tmp.sub("train.out"), tmp.sub("train.err")) == 0);
  std::ofstream(tmp.path / "runs" / "done" / "evil.html")
      << "<title>before</title><script>document.title='RAN'</script>";
  ServeProcess serve(tmp, tmp.sub("runs"));
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  // The console (CSP reports among it) goes to Chromium's log on stderr.
  auto load = [&](const std::string& path, const std::string& name) {
    const std::string cmd = fmt::format(
        "timeout 120 chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking "
        "--disable-component-update --disable-sync --user-data-dir={} --enable-logging=stderr --v=0 "
        "--virtual-time-budget=5000 --dump-dom http://127.0.0.1:{}{} >{} 2>{}",
        tmp.sub(name + "-profile"), serve.port, path, tmp.sub(name + ".dom"), tmp.sub(name + ".log"));
    CHECK(std::system(cmd.c_str()) == 0);
    return std::pair{read_text(tmp.sub(name + ".dom")), read_text(tmp.sub(name + ".log"))};
  };
  const auto [page, page_log] = load("/", "page");
  INFO("page log: ", page_log);
  CHECK(page.find("data-serve-polls=\"") != std::string::npos);  // the update script ran and polled
  CHECK(page.find("<h2>Answer</h2>") != std::string::npos);
  CHECK(page_log.find("Content Security Policy") == std::string::npos);
  CHECK(page_log.find("Refused") == std::string::npos);
  const auto [evil, evil_log] = load("/done/evil.html", "evil");
  INFO("evil.html log: ", evil_log);
  CHECK(evil.find("<title>before</title>") != std::string::npos);  // its script would have made it RAN
  CHECK(evil_log.find("sandboxed") != std::string::npos);          // the log is read: its refusal is there
}

TEST_CASE("serve: a file swapped for a link to outside DIR while polled is never served") {
  TempDir tmp("normlab_serve_race");
  const fs::path dir = tmp.path / "runs";
  write_small_run(dir / "run1");
  tmp.write("secret.txt", "TOPSECRET\n");
  std::ofstream(dir / "run1" / "swap.txt") << "INSIDE\n";
  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    // rename(2) replaces swap.txt atomically: a regular file, then a link out (absolute, then relative).
    for (int i = 0; !stop; ++i) {
      std::error_code ec;
      const fs::path staged = dir / "run1" / "staged";
      fs::remove(staged, ec);
      if (i % 2 == 0) std::ofstream(staged) << "INSIDE\n";
      else if (i % 4 == 1) fs::create_symlink(tmp.path / "secret.txt", staged, ec);
      else fs::create_symlink("../../secret.txt", staged, ec);
      fs::rename(staged, dir / "run1" / "swap.txt", ec);
    }
  });
  int served = 0, refused = 0, leaked = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) {
    const Response r = http_get(serve.port, "/run1/swap.txt");
    if (r.body.find("TOPSECRET") != std::string::npos) ++leaked;
    (r.status == 200 ? served : refused) += 1;
  }
  stop = true;
  swapper.join();
  INFO(served, " served, ", refused, " refused");
  CHECK(leaked == 0);
  CHECK(served > 0);  // the race was run: both states were seen
  CHECK(refused > 0);
}

TEST_CASE("serve: percent-encoded dot segments that stay inside DIR are refused, not served") {
  TempDir tmp("normlab_serve_dots");
  const fs::path dir = tmp.path / "runs";
  write_small_run(dir / "run");
  std::ofstream(dir / "run" / ".normlab.lock") << "LOCKPID 4242\n";
  ServeProcess serve(tmp, dir.string());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  CHECK(http_get(serve.port, "/run/metrics.jsonl").status == 200);
  for (const std::string target : {"/run/%2enormlab.lock", "/run/%2Enormlab.lock", "/run/%2e%2e/run/metrics.jsonl",
                                   "/run/%2E%2E/run/metrics.jsonl", "/run/%2e/metrics.jsonl", "/run/./metrics.jsonl",
                                   "/run/../run/metrics.jsonl", "/run/.%2e/run/metrics.jsonl"}) {
    const Response r = http_get(serve.port, target);
    INFO("GET ", target, " -> ", r.status);
    CHECK((r.status == 400 || r.status == 403 || r.status == 404));
    CHECK(r.body.find("LOCKPID") == std::string::npos);
    CHECK(r.body.find("\"loss\"") == std::string::npos);
  }
}

TEST_CASE("serve: an unreadable or malformed run is its own row (unreadable / error) and every other run still draws") {
  TempDir tmp("normlab_serve_unreadable");
  fs::permissions(tmp.path, fs::perms(0755));  // `nobody` must reach the runs that are readable
  tmp.write("base.json", base_config(40));
  const fs::path runs = tmp.path / "runs";
  REQUIRE(normlab::test::run_normlab({"train", "--config", tmp.sub("base.json"), "--out", (runs / "done").string()},
                                     tmp.sub("train.out"), tmp.sub("train.err")) == 0);
  for (const char* name : {"noread_dir", "noread_metrics", "garbage", "midline", "wrongtype"})
    fs::copy(runs / "done", runs / name);
  const std::string metrics = read_text((runs / "done" / "metrics.jsonl").string());
  std::string garbage(3000, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = char((i * 7919 + 13) % 256);  // binary, newlines among it
  std::ofstream(runs / "garbage" / "metrics.jsonl", std::ios::binary) << garbage;
  const size_t third_line = metrics.find('\n', metrics.find('\n') + 1) + 1;
  std::ofstream(runs / "midline" / "metrics.jsonl") << metrics.substr(0, third_line) << "not a record\n"
                                                    << metrics.substr(third_line);
  std::ofstream(runs / "wrongtype" / "metrics.jsonl")
      << std::regex_replace(metrics, std::regex(R"("loss":[0-9.e+-]+)"), R"("loss":"oops")",
                            std::regex_constants::format_first_only);
  fs::permissions(runs / "noread_dir", fs::perms::none);
  fs::permissions(runs / "noread_metrics" / "metrics.jsonl", fs::perms::none);
  struct Restore {  // so that TempDir can remove them
    fs::path runs;
    ~Restore() {
      std::error_code ec;
      fs::permissions(runs / "noread_dir", fs::perms(0755), ec);
      fs::permissions(runs / "noread_metrics" / "metrics.jsonl", fs::perms(0644), ec);
    }
  } restore{runs};

  ServeProcess serve(tmp, runs.string(), "serve", as_unprivileged());
  REQUIRE_MESSAGE(serve.port > 0, read_text(serve.err_path));
  const Response page = http_get(serve.port, "/");
  CHECK(page.status == 200);
  CHECK(run_states(page.body) ==
        std::vector<std::string>{"error", "error", "error", "unreadable", "unreadable", "finished"});
  CHECK(page.body.find("noread_dir: cannot read: Permission denied") != std::string::npos);
  CHECK(page.body.find("noread_metrics/metrics.jsonl: cannot read: Permission denied") != std::string::npos);
  CHECK(page.body.find("garbage/metrics.jsonl: line 1: not a JSON record") != std::string::npos);
  CHECK(page.body.find("midline/metrics.jsonl: line 3: not a JSON record") != std::string::npos);  // not skipped
  CHECK(page.body.find("wrongtype/metrics.jsonl: line 1: loss: must be") != std::string::npos);
  CHECK(page.body.find("<h2>Answer</h2>") != std::string::npos);  // the readable run still draws
  CHECK(http_get(serve.port, "/runs.csv").body.find("\ndone,") != std::string::npos);

  // `report` on the unreadable ones, and `serve` / `report` on an unreadable DIR: one line, exit 2.
  auto refused = [&](const std::vector<std::string>& args, const std::string& named) {
    Child child(args, tmp.sub("cli.out"), tmp.sub("cli.err"), as_unprivileged());
    const int code = child.wait(std::chrono::seconds(30));
    const std::string err = read_text(tmp.sub("cli.err"));
    fs::remove(tmp.sub("cli.err"));
    INFO(fmt::format("{}", fmt::join(args, " ")), ": ", err);
    CHECK(code == 2);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(err.find(named + ": cannot read") != std::string::npos);
  };
  refused({"report", (runs / "noread_metrics").string(), "--out", tmp.sub("r1")},
          (runs / "noread_metrics" / "metrics.jsonl").string());
  refused({"report", (runs / "noread_dir").string(), "--out", tmp.sub("r2")}, (runs / "noread_dir").string());
  refused({"serve", (runs / "noread_dir").string(), "--port", "0"}, (runs / "noread_dir").string());
  fs::permissions(runs, fs::perms(0700));
  refused({"report", runs.string(), "--out", tmp.sub("r3")}, runs.string());
  refused({"serve", runs.string(), "--port", "0"}, runs.string());
  fs::permissions(runs, fs::perms(0755));
}

TEST_CASE("csv: runs.csv and curves.csv quote every text field (RFC 4180) and neutralise formulas, Python reads them") {
  TempDir tmp("normlab_csv_quoting");
  tmp.write("base.json", base_config(40));
  const fs::path runs = tmp.path / "runs";
  REQUIRE(normlab::test::run_normlab({"train", "--config", tmp.sub("base.json"), "--out", (runs / "plain").string()},
                                     tmp.sub("train.out"), tmp.sub("train.err")) == 0);
  const std::vector<std::string> names{"a,b",      "say \"hi\"", "two\nlines", "=HYPERLINK(\"evil.example\",\"click\")",
                                       "@SUM(A1)", "+1+cmd",     "-0.5"};
  for (const std::string& name : names) fs::copy(runs / "plain", runs / name, fs::copy_options::recursive);
  REQUIRE(normlab::test::run_normlab({"report", runs.string(), "--out", tmp.sub("report")}, tmp.sub("report.out"),
                                     tmp.sub("report.err")) == 0);
  // Each file as Python's csv module reads it: a JSON list of rows.
  auto python_rows = [&](const std::string& file) {
    const std::string cmd = fmt::format(
        "/usr/bin/python3 -c 'import csv,json,sys; print(json.dumps(list(csv.reader(open(sys.argv[1], "
        "newline=\"\")))))' "
        "{} >{}",
        tmp.sub("report/" + file), tmp.sub(file + ".json"));
    REQUIRE(std::system(cmd.c_str()) == 0);
    return nlohmann::json::parse(read_text(tmp.sub(file + ".json")));
  };
  const std::map<std::string, std::string> expected{{"a,b", "a,b"},
                                                    {"say \"hi\"", "say \"hi\""},
                                                    {"two\nlines", "two\nlines"},
                                                    {"=HYPERLINK(\"evil.example\",\"click\")",
                                                     "'=HYPERLINK(\"evil.example\",\"click\")"},
                                                    {"@SUM(A1)", "'@SUM(A1)"},
                                                    {"+1+cmd", "'+1+cmd"},
                                                    {"-0.5", "-0.5"},
                                                    {"plain", "plain"}};
  for (const std::string file : {"runs.csv", "curves.csv"}) {
    const nlohmann::json rows = python_rows(file);
    REQUIRE(rows.size() > names.size());
    std::set<std::string> seen;
    for (const auto& row : rows) {
      INFO(file, ": ", row.dump());
      CHECK(row.size() == rows[0].size());  // no cell spilled into the next column
      if (&row != &rows[0]) seen.insert(row[0].get<std::string>());
    }
    std::set<std::string> wanted;
    for (const auto& [name, cell] : expected) wanted.insert(cell);
    CHECK(seen == wanted);
    // Numbers stay numbers: the lr column of every data row is 0.01 as written, unquoted.
    const size_t lr = std::find(rows[0].begin(), rows[0].end(), "lr") - rows[0].begin();
    REQUIRE(lr < rows[0].size());
    for (size_t i = 1; i < rows.size(); ++i) CHECK(rows[i][lr] == "0.01");
  }
  const std::string raw = read_text(tmp.sub("report/runs.csv"));
  CHECK(raw.find("\n\"'=HYPERLINK(\"\"evil.example\"\",\"\"click\"\")\",") != std::string::npos);
  CHECK(raw.find("\n-0.5,") != std::string::npos);
}
