#pragma once
// Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: commands
// on fd 3, answers on fd 4, each a JSON message ending in a NUL byte): open a page, run JavaScript
// in it, move and click the mouse, take a screenshot. No WebSocket and no Python: a test of what a
// user sees in a real browser, each step bounded by a timeout.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <thread>

namespace normlab::test {

class Chromium {
 public:
  static bool available() { return std::system("command -v chromium >/dev/null 2>&1") == 0; }

  // Starts chromium with its own profile directory; its stderr goes to `log_path`.
  Chromium(const std::string& profile_dir, const std::string& log_path, int width = 1280, int height = 1000)
      : width_(width), height_(height), log_path_(log_path) {
    ::signal(SIGPIPE, SIG_IGN);  // a browser that died is an error of call(), not the end of the tests
    int to_browser[2], from_browser[2];
    if (::pipe2(to_browser, O_CLOEXEC) != 0 || ::pipe2(from_browser, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      // Copies above 4 first (a pipe end may already be fd 3 or 4), then onto 3 and 4: dup2 to
      // another number clears O_CLOEXEC, so the browser inherits exactly these two.
      const int commands = ::fcntl(to_browser[0], F_DUPFD, 10), answers = ::fcntl(from_browser[1], F_DUPFD, 10);
      ::dup2(commands, 3);
      ::dup2(answers, 4);
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (log >= 0) ::dup2(log, STDERR_FILENO), ::dup2(log, STDOUT_FILENO);
      const std::string profile = "--user-data-dir=" + profile_dir;
      const std::string size = "--window-size=" + std::to_string(width) + "," + std::to_string(height);
      // Debian's /usr/bin/chromium is a shell wrapper; the browser itself keeps fds 3 and 4 for sure.
      const char* binary =
          ::access("/usr/lib/chromium/chromium", X_OK) == 0 ? "/usr/lib/chromium/chromium" : "chromium";
      ::execlp(binary, "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--remote-debugging-pipe", profile.c_str(), size.c_str(), "about:blank", (char*)nullptr);
      ::_exit(127);
    }
    ::close(to_browser[0]);
    ::close(from_browser[1]);
    to_ = to_browser[1];
    from_ = from_browser[0];
  }
  ~Chromium() {
    try {
      if (pid_ > 0) call("Browser.close", nlohmann::json::object(), false, 5);
    } catch (...) {
    }
    if (to_ >= 0) ::close(to_);
    if (from_ >= 0) ::close(from_);
    for (int i = 0; pid_ > 0 && i < 50; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (pid_ > 0) ::kill(pid_, SIGKILL), ::waitpid(pid_, nullptr, 0);
  }
  Chromium(const Chromium&) = delete;
  Chromium& operator=(const Chromium&) = delete;

  // One DevTools command (to the page when `on_page`); its result, or std::runtime_error with the
  // error or a timeout.
  nlohmann::json call(const std::string& method, const nlohmann::json& params = nlohmann::json::object(),
                      bool on_page = true, int timeout_s = 30) {
    const int id = next_id_++;
    nlohmann::json message = {{"id", id}, {"method", method}, {"params", params}};
    if (on_page && !session_.empty()) message["sessionId"] = session_;
    const std::string text = message.dump() + '\0';
    for (size_t sent = 0; sent < text.size();) {
      const ssize_t n = ::write(to_, text.data() + sent, text.size() - sent);
      if (n <= 0) throw std::runtime_error("chromium: cannot write to its pipe; its log: " + log());
      sent += size_t(n);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (true) {
      for (size_t end; (end = buffer_.find('\0')) != std::string::npos;) {
        const nlohmann::json answer = nlohmann::json::parse(buffer_.substr(0, end), nullptr, false);
        buffer_.erase(0, end + 1);
        if (!answer.is_object() || answer.value("id", -1) != id) continue;  // an event, or another answer
        if (answer.contains("error")) throw std::runtime_error(method + ": " + answer["error"].dump());
        return answer.value("result", nlohmann::json::object());
      }
      const int left = int(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      pollfd p{from_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, left) <= 0) throw std::runtime_error(method + ": no answer from chromium");
      char chunk[65536];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) throw std::runtime_error(method + ": chromium closed its pipe; its log: " + log());
      buffer_.append(chunk, size_t(n));
    }
  }

  // Opens `url` in a new tab of the given size and attaches to it.
  void open(const std::string& url) {
    const std::string target = call("Target.createTarget", {{"url", "about:blank"}}, false)["targetId"];
    session_ = call("Target.attachToTarget", {{"targetId", target}, {"flatten", true}}, false)["sessionId"];
    call("Emulation.setDeviceMetricsOverride",
         {{"width", width_}, {"height", height_}, {"deviceScaleFactor", 1}, {"mobile", false}});
    call("Page.navigate", {{"url", url}});
  }

  // The value of a JavaScript expression in the page (a promise is awaited).
  nlohmann::json eval(const std::string& expression) {
    const nlohmann::json r =
        call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails")) throw std::runtime_error("page: " + r["exceptionDetails"].dump());
    return r["result"].value("value", nlohmann::json());
  }

  // Polls `expression` every 50 ms until it is true; false after `seconds`.
  bool wait_until(const std::string& expression, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        if (eval("!!(" + expression + ")") == true) return true;
      } catch (const std::runtime_error&) {  // the page is still loading
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // A mouse event at page coordinates (CSS pixels): "mouseMoved", "mousePressed", "mouseReleased".
  void mouse(const std::string& type, double x, double y) {
    nlohmann::json p = {{"type", type}, {"x", x}, {"y", y}, {"button", type == "mouseMoved" ? "none" : "left"}};
    if (type != "mouseMoved") p["clickCount"] = 1;
    call("Input.dispatchMouseEvent", p);
  }
  void click(double x, double y) {
    mouse("mouseMoved", x, y);
    mouse("mousePressed", x, y);
    mouse("mouseReleased", x, y);
  }

  // A PNG of the viewport written to `path`.
  void screenshot(const std::string& path) {
    const std::string data = call("Page.captureScreenshot", {{"format", "png"}})["data"];
    std::ofstream(path, std::ios::binary) << base64_decode(data);
  }

 private:
  std::string log() const {
    std::ifstream in(log_path_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
  }
  static std::string base64_decode(const std::string& text) {
    std::string out;
    uint32_t group = 0;
    int bits = 0;
    for (char c : text) {
      int v = c >= 'A' && c <= 'Z'   ? c - 'A'
              : c >= 'a' && c <= 'z' ? c - 'a' + 26
              : c >= '0' && c <= '9' ? c - '0' + 52
              : c == '+'             ? 62
              : c == '/'             ? 63
                                     : -1;
      if (v < 0) continue;
      group = group << 6 | uint32_t(v);
      if ((bits += 6) >= 8) out += char(group >> (bits -= 8) & 0xff);
    }
    return out;
  }
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1, next_id_ = 1, width_, height_;
  std::string buffer_, session_, log_path_;
};

}  // namespace normlab::test
