// `normlab serve` against clients and files that set their own sizes, in-process with short
// deadlines: HTTP edges per the RFCs (a Range clamped to the file, a body over 64 KiB refused, two
// Content-Lengths, control bytes in Host), a fast 503 past either cap instead of a queue, an idle,
// half-sent or trickling connection closed at its deadline; the incremental metrics reader (lines
// appended later, a torn last line, NUL garbage that costs nothing); a folder of two tasks' runs
// showing each run's real state and the reason there is no report; a run past the report's budget
// left out with its row still following it; curves.csv written in pieces equal to the whole.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "normlab/error.hpp"
#include "normlab/serve/live.hpp"
#include "normlab/serve/series.hpp"
#include "normlab/serve/server.hpp"
#include "normlab/study/svg.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/run_dirs.hpp"
#include "run_config.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using normlab::test::TempDir;
namespace serve = normlab::serve;

namespace {

std::string step_line(int64_t step, double loss) {
  return json{{"step", step}, {"loss", loss}, {"accuracy", 0.5}, {"grad_norm", 1.0}, {"lr", 0.01}}.dump() + "\n";
}

// A finished run of `steps` steps of `task`.
void write_finished_run(const fs::path& dir, const std::string& task, int64_t steps) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << normlab::test::resolved_run_config({.task = task, .steps = steps});
  std::ofstream metrics(dir / "metrics.jsonl");
  for (int64_t s = 1; s <= steps; ++s) metrics << step_line(s, 2.0 - 0.001 * double(s));
  metrics << json{{"split", "valid"}, {"step", steps}, {"loss", 1.0}, {"accuracy", 0.75}, {"targets", 100}}.dump()
          << "\n";
  std::ofstream(dir / "summary.json") << json{{"diverged", false}, {"wall_time_s", 1.5}, {"threads", 1}}.dump();
}

// The server of `dir` on a free loopback port, running on its own thread until the end of scope.
struct InProcessServer {
  serve::LiveReport live;
  serve::Server server;
  std::thread thread;
  int port = 0;
  explicit InProcessServer(const std::string& dir, serve::ServerLimits limits = {}) : live(dir), server(live, limits) {
    port = server.bind("127.0.0.1", 0);
    thread = std::thread([this] { server.run(); });
    while (!server.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // run() has started accepting
  }
  ~InProcessServer() {
    server.stop();
    thread.join();
  }
};

// Waits for the server to reach a state (an event it counts), failing instead of hanging if it never does.
template <class Condition>
bool reaches(Condition condition) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!condition())
    if (std::chrono::steady_clock::now() > give_up) return false;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return true;
}

int connect_to(int port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  timeval timeout{10, 0};  // a server that never answers fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (receive_buffer > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

struct Answer {
  int status = 0;
  std::string head, body;
};

// Everything the server sends until it closes the connection.
Answer read_answer(int fd) {
  std::string raw;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) raw.append(buffer, size_t(n));
  ::close(fd);
  Answer a;
  if (raw.rfind("HTTP/1.1 ", 0) == 0) a.status = std::atoi(raw.c_str() + 9);
  const size_t end = raw.find("\r\n\r\n");
  if (end != std::string::npos) a.head = raw.substr(0, end), a.body = raw.substr(end + 4);
  return a;
}

// `request` sent byte for byte as given.
Answer send_raw(int port, const std::string& request) {
  const int fd = connect_to(port);
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  return read_answer(fd);
}

Answer get(int port, const std::string& target, const std::string& headers = "") {
  return send_raw(port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + "\r\n");
}

std::string header_value(const Answer& a, const std::string& name) {
  const std::string key = "\r\n" + name + ": ";
  const size_t at = a.head.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return a.head.substr(from, a.head.find("\r\n", from) - from);
}

}  // namespace

TEST_CASE("serve: a Range is clamped to the file (RFC 9110), one past its end is 416 with bytes */size") {
  TempDir tmp("normlab_serve_range_clamp");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  std::string data(24780, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char('a' + i % 26);
  std::ofstream(tmp.path / "run1" / "train.log", std::ios::binary) << data;
  InProcessServer s(tmp.path.string());
  const std::string size = std::to_string(data.size());

  const Answer huge = get(s.port, "/run1/train.log", "Range: bytes=0-99999999999999\r\n");
  CHECK(huge.status == 206);
  CHECK(header_value(huge, "Content-Range") == "bytes 0-24779/" + size);
  CHECK((huge.body == data));
  const Answer tail = get(s.port, "/run1/train.log", "Range: bytes=24770-99999999999999\r\n");
  CHECK(tail.status == 206);
  CHECK(header_value(tail, "Content-Range") == "bytes 24770-24779/" + size);
  CHECK((tail.body == data.substr(24770)));
  const Answer suffix = get(s.port, "/run1/train.log", "Range: bytes=-5\r\n");
  CHECK(suffix.status == 206);
  CHECK(header_value(suffix, "Content-Range") == "bytes 24775-24779/" + size);
  CHECK((suffix.body == data.substr(24775)));
  const Answer longer_suffix = get(s.port, "/run1/train.log", "Range: bytes=-99999999\r\n");
  CHECK(longer_suffix.status == 206);
  CHECK((longer_suffix.body == data));
  const Answer past = get(s.port, "/run1/train.log", "Range: bytes=24780-\r\n");
  CHECK(past.status == 416);
  CHECK(header_value(past, "Content-Range") == "bytes */" + size);
  CHECK(past.body.empty());
  const Answer whole = get(s.port, "/run1/train.log");
  CHECK(whole.status == 200);
  CHECK(header_value(whole, "Content-Length") == size);
  CHECK((whole.body == data));
  // The live tables are drawn for each request: a Range on them is ignored (200, the whole).
  const Answer csv = get(s.port, "/runs.csv", "Range: bytes=0-99999999999999\r\n");
  CHECK(csv.status == 200);
  CHECK(header_value(csv, "Content-Range").empty());
}

TEST_CASE("serve: a body over 64 KiB is 413, two different Content-Lengths 400, control bytes in Host 400") {
  TempDir tmp("normlab_serve_http_edges");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  InProcessServer s(tmp.path.string());
  const std::string target = "GET /run1/config.json HTTP/1.1\r\nHost: 127.0.0.1\r\n";

  const Answer big = send_raw(s.port, target + "Content-Length: 70000\r\n\r\n" + std::string(70000, 'x'));
  CHECK(big.status == 413);
  CHECK(big.body.find("64 KiB") != std::string::npos);
  const Answer small = send_raw(s.port, target + "Content-Length: 10\r\n\r\n0123456789");
  CHECK(small.status == 200);  // a small body is read and ignored
  CHECK(small.body.find("\"model\"") != std::string::npos);
  CHECK(send_raw(s.port, target + "Content-Length: 5\r\nContent-Length: 6\r\n\r\n012345").status == 400);
  CHECK(send_raw(s.port, target + "Content-Length: 2\r\ncontent-length: 2\r\n\r\nab").status ==
        200);  // the same value twice
  CHECK(send_raw(s.port, target + "Content-Length: -1\r\n\r\n").status == 400);
  CHECK(send_raw(s.port, target + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status == 411);

  const std::string nul_host =
      std::string("GET /run1/config.json HTTP/1.1\r\nHost: localhost") + '\0' + ".evil.com\r\n\r\n";
  const Answer nul = send_raw(s.port, nul_host);
  CHECK(nul.status == 400);
  CHECK(nul.body.find("\"model\"") == std::string::npos);
  CHECK(send_raw(s.port, "GET / HTTP/1.1\r\nHost: local\x01host\r\n\r\n").status == 400);
  CHECK(send_raw(s.port, "GET / HTTP/1.1\r\nHost: localhost\x7f\r\n\r\n").status == 400);
  CHECK(send_raw(s.port, "GET / HTTP/1.1\r\nHost: localhost\r\nX-Tab:\tvalue\r\n\r\n").status ==
        200);  // HTAB is allowed
  CHECK(
      send_raw(s.port, "GET / HTTP/1.1\r\nHost: localhost\r\nX-Long: " + std::string(20000, 'a') + "\r\n\r\n").status ==
      431);
}

TEST_CASE("serve: past the waiting cap a new connection is answered 503 at once, not queued") {
  TempDir tmp("normlab_serve_waiting_cap");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  serve::ServerLimits limits;
  limits.max_waiting = 2;
  limits.request_deadline = std::chrono::seconds(60);  // the idle ones stay for the whole test
  InProcessServer s(tmp.path.string(), limits);
  const int idle1 = connect_to(s.port), idle2 = connect_to(s.port);
  REQUIRE(reaches([&] { return !(s.server.waiting() < 2); }));  // both admitted by the gate
  // Queued, this would wait for an idle connection's deadline (60 s) and fail the 10 s receive.
  const Answer refused = get(s.port, "/run1/config.json");
  CHECK(refused.status == 503);
  CHECK(header_value(refused, "Retry-After") == "1");
  ::close(idle1);
  REQUIRE(reaches([&] { return !(s.server.waiting() > 1); }));  // the gate saw it leave
  CHECK(get(s.port, "/run1/config.json").status == 200);
  ::close(idle2);
}

TEST_CASE("serve: past the cap of requests being answered a new request is answered 503 at once") {
  TempDir tmp("normlab_serve_busy_cap");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  std::ofstream(tmp.path / "run1" / "big.log", std::ios::binary) << std::string(32 << 20, 'z');
  serve::ServerLimits limits;
  limits.max_connections = 1;
  limits.write_timeout_s = 60;
  InProcessServer s(tmp.path.string(), limits);
  // A client that asks for 32 MiB through a small window and reads nothing: its answer's thread
  // waits in write(2).
  const int stalled = connect_to(s.port, 4096);
  const std::string request = "GET /run1/big.log HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(stalled, request.data(), request.size(), MSG_NOSIGNAL);
  REQUIRE(reaches([&] { return !(s.server.busy() < 1); }));
  const Answer refused = get(s.port, "/run1/config.json");
  CHECK(refused.status == 503);
  ::close(stalled);  // its write fails; its thread ends
  REQUIRE(reaches([&] { return !(s.server.busy() > 0); }));
  CHECK(get(s.port, "/run1/config.json").status == 200);
}

TEST_CASE("serve: an idle, a half-sent and a trickling connection are answered 408 and closed at the deadline") {
  TempDir tmp("normlab_serve_deadline");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  serve::ServerLimits limits;
  limits.request_deadline = std::chrono::milliseconds(300);
  InProcessServer s(tmp.path.string(), limits);
  const auto start = std::chrono::steady_clock::now();
  const int idle = connect_to(s.port);
  const int half = connect_to(s.port);
  const std::string start_of_request = "GET /run1/config.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  ::send(half, start_of_request.data(), start_of_request.size(), MSG_NOSIGNAL);
  const int trickle = connect_to(s.port);
  std::atomic<bool> closed{false};
  std::thread trickler([&] {  // a byte every 20 ms, each well within any per-read timeout
    for (size_t i = 0; !closed && i < 10000; ++i) {
      const char byte = start_of_request[i % start_of_request.size()];
      if (::send(trickle, &byte, 1, MSG_NOSIGNAL) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  for (const int fd : {idle, half, trickle}) {
    const Answer a = read_answer(fd == trickle ? ::dup(fd) : fd);  // returns when the server closes
    CHECK(a.status == 408);
  }
  closed = true;
  trickler.join();
  ::close(trickle);
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CHECK(s.server.waiting() == 0);
  CHECK(get(s.port, "/run1/config.json").status == 200);  // a whole request still gets its answer
}

TEST_CASE("serve: 300 hostile connections open, a normal request is still answered") {
  TempDir tmp("normlab_serve_hostile");
  write_finished_run(tmp.path / "run1", "reverse", 3);
  InProcessServer s(tmp.path.string());
  std::vector<int> hostile;
  const std::string half = "GET /run1/config.json HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  for (int i = 0; i < 300; ++i) {
    hostile.push_back(connect_to(s.port));
    if (i % 2) ::send(hostile.back(), half.data(), half.size(), MSG_NOSIGNAL);  // half idle, half half-sent
  }
  REQUIRE(reaches([&] { return !(s.server.waiting() < 300); }));
  CHECK(s.server.busy() == 0);  // none holds a thread
  const Answer a = get(s.port, "/run1/config.json");
  CHECK(a.status == 200);
  CHECK(a.body.find("\"model\"") != std::string::npos);
  for (const int fd : hostile) ::close(fd);
}

TEST_CASE(
    "serve: the metrics reader parses only appended bytes, completes a torn last line, and stops at NUL garbage") {
  TempDir tmp("normlab_serve_reader");
  const std::string path = tmp.sub("metrics.jsonl");
  {
    std::ofstream out(path);
    for (int s = 1; s <= 3; ++s) out << step_line(s, 3.0 - s);
  }
  serve::MetricsReader reader(path);
  CHECK_FALSE(reader.update());
  CHECK(reader.lines() == 3);
  CHECK(reader.summary().last_step == 3);
  const uint64_t after_three = reader.offset();
  CHECK(after_three == fs::file_size(path));
  {
    std::ofstream out(path, std::ios::app);
    out << step_line(4, 0.5) << R"({"step":5,"loss":0.2)";  // the fifth line torn mid-record
  }
  reader.update();
  CHECK(reader.lines() == 4);
  CHECK(reader.summary().last_step == 4);
  CHECK(reader.problem().empty());  // a torn last line is not a problem: it is read when whole
  {
    std::ofstream out(path, std::ios::app);
    out << R"(,"accuracy":0.9})"
        << "\n";
  }
  reader.update();
  CHECK(reader.lines() == 5);
  CHECK(reader.summary().last_step == 5);
  CHECK(reader.summary().last_loss == doctest::Approx(0.2));
  const serve::RunSeries series = reader.series("train/loss");
  REQUIRE(series.metrics.size() == 1);
  CHECK(series.metrics[0].value == std::vector<double>{2.0, 1.0, 0.0, 0.5, 0.2});
  // A line in the middle that is no record: named, the reading goes on.
  {
    std::ofstream out(path, std::ios::app);
    out << "garbage\n" << step_line(7, 0.1);
  }
  reader.update();
  CHECK(reader.problem() == path + ": line 6: not a JSON record (only a torn last line is skipped)");
  CHECK(reader.summary().last_step == 7);
  // The file replaced by a shorter one: read again from its start.
  {
    std::ofstream out(path + ".new");
    out << step_line(1, 9.0);
  }
  fs::rename(path + ".new", path);
  reader.update();
  CHECK(reader.lines() == 1);
  CHECK(reader.problem().empty());
  CHECK(reader.summary().last_loss == 9.0);

  // 30 valid lines, then 8 MiB of NUL bytes without a newline: read up to 1 MiB past the last
  // line, named, nothing kept; more NUL bytes later are not read at all.
  const std::string nul_path = tmp.sub("nul.jsonl");
  {
    std::ofstream out(nul_path, std::ios::binary);
    for (int s = 1; s <= 30; ++s) out << step_line(s, 1.0);
    out << std::string(8 << 20, '\0');
  }
  serve::MetricsReader nul(nul_path);
  nul.update();
  CHECK(nul.lines() == 30);
  CHECK(nul.problem() == nul_path + ": line 31: longer than 1 MiB: not a metrics record");
  CHECK(nul.memory_bytes() < (256u << 10));
  const uint64_t stopped_at = nul.offset();
  CHECK(stopped_at < fs::file_size(nul_path));
  { std::ofstream(nul_path, std::ios::binary | std::ios::app) << std::string(1 << 20, '\0'); }
  CHECK_FALSE(nul.update());
  CHECK(nul.offset() == stopped_at);
  CHECK(nul.series("train/loss").metrics.at(0).records == 30);
}

TEST_CASE("serve: a folder of two tasks' runs shows each finished run and the reason there is no report") {
  TempDir tmp("normlab_serve_two_tasks");
  write_finished_run(tmp.path / "a_reverse", "reverse", 12);
  write_finished_run(tmp.path / "b_sort", "sort", 9);
  std::string reason;  // what `normlab report` refuses the folder with
  try {
    normlab::study::plan_from_run_dirs({tmp.sub("a_reverse"), tmp.sub("b_sort")}, {});
  } catch (const normlab::InputError& e) {
    reason = e.what();
  }
  REQUIRE_MESSAGE(!reason.empty(), "the two tasks' runs were planned together");
  serve::LiveReport live(tmp.path.string());
  const serve::LiveReport::Page page = live.page();
  const json status = json::parse(page.status_json);
  REQUIRE(status["runs"].size() == 2);
  for (const json& row : status["runs"]) {
    INFO(row.dump());
    CHECK(row["state"] == "finished");
    CHECK(row["step"] == (row["name"] == "a_reverse" ? 12 : 9));
    CHECK(row["best_accuracy"] == 0.75);
  }
  CHECK(page.html.find("No report yet: " + normlab::study::xml_escape(reason) + ".") != std::string::npos);
  CHECK(page.html.find("No report yet: .") == std::string::npos);
  CHECK(page.report_md.find(reason) != std::string::npos);
}

TEST_CASE("serve: a run past the report's budget is left out with its reason - its row and charts follow it") {
  TempDir tmp("normlab_serve_budget");
  write_finished_run(tmp.path / "a_small", "reverse", 5);
  write_finished_run(tmp.path / "b_large", "reverse", 400);
  const uint64_t small = fs::file_size(tmp.path / "a_small" / "metrics.jsonl");
  serve::LiveReport live(tmp.path.string(), small + 100);  // room for the small run only
  const serve::LiveReport::Page page = live.page();
  const json status = json::parse(page.status_json);
  REQUIRE(status["runs"].size() == 2);
  const json& large = status["runs"][0]["name"] == "b_large" ? status["runs"][0] : status["runs"][1];
  CHECK(large["state"] == "finished");
  CHECK(large["step"] == 400);
  CHECK(large["steps"] == 400);
  CHECK(large["loss"] == doctest::Approx(2.0 - 0.4));
  CHECK(large["problem"].get<std::string>().find("past what the live report reads") != std::string::npos);
  CHECK(page.html.find("No report yet") == std::string::npos);  // the small run's report is drawn
  const serve::LiveReport::SeriesAnswer chart = live.series("b_large", "train/loss");
  CHECK(json::parse(chart.json)["metrics"]["train/loss"]["records"] == 400);
  // The curves hold the small run's points only (the large one is not read whole).
  const std::string curves = live.curves_csv();
  CHECK(curves.find("b_large") == std::string::npos);
  CHECK(curves.find("a_small") != std::string::npos);
}

TEST_CASE("serve: a left-out run whose metrics.jsonl turns to NUL bytes becomes an error naming the line") {
  TempDir tmp("normlab_serve_budget_nul");
  write_finished_run(tmp.path / "a_small", "reverse", 5);
  write_finished_run(tmp.path / "b_nul", "reverse", 30);
  {
    std::ofstream(tmp.path / "b_nul" / "metrics.jsonl", std::ios::binary | std::ios::app) << std::string(3 << 20, '\0');
  }
  serve::LiveReport live(tmp.path.string(), fs::file_size(tmp.path / "a_small" / "metrics.jsonl") + 100);
  live.page();              // the first drawing starts b_nul's reader
  live.wait_for_readers();  // which reads until the over-long line stops it
  json row;
  REQUIRE(reaches([&] {  // a drawing after that (not sooner than 5 drawing times after the last)
    const json status = json::parse(live.page().status_json);
    for (const json& r : status["runs"])
      if (r["name"] == "b_nul") row = r;
    return row["state"] == "error";
  }));
  INFO(row.dump());
  CHECK(row["problem"] ==
        (tmp.path / "b_nul" / "metrics.jsonl").string() + ": line 32: longer than 1 MiB: not a metrics record");
}

TEST_CASE("serve: curves.csv written in pieces is study::curves_csv of the runs, row for row") {
  TempDir tmp("normlab_serve_curves_pieces");
  write_finished_run(tmp.path / "run_long", "reverse", 45000);  // three slices of steps
  write_finished_run(tmp.path / "run_short", "reverse", 7);
  serve::LiveReport live(tmp.path.string());
  live.page();
  const normlab::study::ComparePlan plan =
      normlab::study::plan_from_run_dirs({tmp.sub("run_long"), tmp.sub("run_short")}, {});
  std::vector<normlab::study::RunResult> results;
  for (const auto& spec : plan.runs) results.push_back(normlab::study::read_run(spec, spec.dir));
  const std::string expected = normlab::study::curves_csv(results);
  serve::LiveReport::CurvesWriter writer = live.curves_writer();
  std::string pieces;
  size_t count = 0;
  for (std::string piece; !(piece = writer.next(64 << 10)).empty(); ++count) {
    CHECK(piece.size() < (2u << 20));
    pieces += piece;
  }
  CHECK(count > 3);
  CHECK((pieces == expected));
}
