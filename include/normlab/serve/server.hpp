#pragma once
// `normlab serve`'s HTTP side, on cpp-httplib: GET / is the live report page, /runs.csv and
// /curves.csv the live tables, any other path a file inside DIR. Read-only: GET and HEAD only.
#include <memory>
#include <string>

#include "normlab/serve/live.hpp"

namespace normlab::serve {

// The file a request path names inside `root` (canonical), or the status that refuses it:
// 403 for a path that leaves root (a ".." segment, or a link leading outside), 404 for a name that
// does not exist, is hidden (a segment starting with '.'), or is not a regular file.
struct Resolved {
  int status = 404;  // 200: serve `file`
  std::string file;
};
Resolved resolve_request_path(const std::string& root, const std::string& request_path);

class Server {
 public:
  explicit Server(LiveReport& live);
  ~Server();
  // Binds `address` (an IP literal) and `port` (0: any free port); returns the port bound.
  // InputError when it cannot (the port is taken, the address is not this machine's).
  int bind(const std::string& address, int port);
  void run();   // serves until stop()
  void stop();  // from any thread

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab::serve
