// normlab serve DIR [--port N] [--bind ADDR]
//
// The report of DIR (a run directory, a compare output directory, a folder of run directories) as
// a web page that follows the runs while they train. Read-only; 127.0.0.1 unless --bind says
// otherwise. SIGINT / SIGTERM stop it (exit 0).
#include <fmt/core.h>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "commands.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/serve/server.hpp"

namespace normlab::cli {

namespace {

struct ServeOptions {
  std::string dir;
  int port = 8000;
  std::string bind = "127.0.0.1";
};

bool is_loopback(const std::string& address) { return address.rfind("127.", 0) == 0 || address == "::1"; }

void run(const ServeOptions& options) {
  serve::LiveReport live(options.dir);
  serve::Server server(live);
  const int port = server.bind(options.bind, options.port);
  // The signals are taken by one thread that stops the server; every other thread (the server's
  // workers are started by run()) inherits the blocked mask.
  io::StopSignalWaiter stop_signals;
  std::thread stopper([&] {
    stop_signals.wait();
    server.stop();
  });
  const std::string host = options.bind.find(':') != std::string::npos ? "[" + options.bind + "]" : options.bind;
  fmt::print("serve: http://{}:{}/ shows {} (read-only; Ctrl-C stops)\n", host, port, options.dir);
  if (live.waiting())
    fmt::print(
        "serve: {} does not exist yet: waiting for it (start the study with `normlab compare --config FILE "
        "--out {}`)\n",
        options.dir, options.dir);
  if (!is_loopback(options.bind))
    fmt::print(stderr, "serve: note: listening on {}: anyone who can reach this address can read the runs\n",
               options.bind);
  std::fflush(stdout);
  server.run();
  stop_signals.wake();  // wakes the stopper if run() returned on its own
  stopper.join();
  fmt::print("serve: stopped\n");
}

}  // namespace

void add_serve(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Show a run, a compare output or a folder of runs as a live report");
  cmd->add_option("dir", options->dir, "Run directory, compare output directory, or folder of run directories")
      ->required();
  cmd->add_option("--port", options->port, "Port (default 8000; 0 picks a free one and prints it)");
  cmd->add_option("--bind", options->bind, "Address to listen on (default 127.0.0.1: this machine only)");
  cmd->footer(
      "The page is the report of DIR (a compare directory's with compare's names), a sortable run table with\n"
      "progress and ETA, and interactive charts of every logged metric, updated while the runs write (no\n"
      "reload). DIR may not exist yet: serve waits for it. It never writes into DIR nor takes a run's lock.");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
