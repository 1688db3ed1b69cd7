// normlab bench compare --config FILE [--out DIR] [--jobs N] [--json]
// Where a compare's wall time goes (docs/PERFORMANCE.md, "Where a compare spends its time"): trains the grid as
// `normlab compare` does, into a fresh temporary directory unless --out, then prints the share of
// the run slots' wall time (and of the CPU time) in training steps and where the rest went, from
// the runs' own records (summary.json "timing") and what the compare saw of their processes.
#include <fmt/core.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/io/text.hpp"
#include "normlab/kernels/dispatch.hpp"
#include "normlab/study/scheduler.hpp"

namespace normlab::cli {

namespace {

struct BenchCompareOptions {
  std::string config, out;
  int jobs = 1;
  bool json = false;
};

// Notes on stderr; the progress line only at the end of each pass.
class QuietCompareLogger : public study::CompareLogger {
 public:
  void note(const std::string& line) override { fmt::print(stderr, "{}\n", io::escape_control_lines(line)); }
  void progress(const std::string& line, bool final_line) override {
    if (final_line) fmt::print(stderr, "{}\n", io::escape_control_lines(line));
  }
  bool redraws() const override { return false; }
};

// A new directory under the system's temporary directory, removed with everything in it.
struct TemporaryDirectory {
  std::string path;
  TemporaryDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "normlab_bench_compare_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw InputError("bench compare: cannot create a temporary directory");
    path = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? fmt::format("{} {} {}", one, five, fifteen) : "unknown";
}

void run(const BenchCompareOptions& options) {
  io::install_stop_signals();
  std::unique_ptr<TemporaryDirectory> temporary;
  study::CompareOptions compare;
  compare.config = options.config;
  compare.jobs = options.jobs;
  compare.train_entry = [](const std::vector<std::string>& args) { return run_command_line(args); };  // as compare
  if (options.out.empty()) {
    temporary = std::make_unique<TemporaryDirectory>();
    compare.out = temporary->path;
  } else {
    compare.out = options.out;
  }
  const std::string load_before = load_average();
  QuietCompareLogger logger;
  const study::CompareResult result = study::run_compare(compare, logger, io::stop_flag());
  const std::string load_after = load_average();
  for (const std::string& failure : result.failures) fmt::print(stderr, "compare: run {}\n", failure);
  if (!result.bad_input.empty()) throw InputError(result.bad_input);
  if (result.stop_signal != 0) throw ExitCode{exit_code_for_signal(result.stop_signal)};
  const study::CompareTiming& t = result.timing;
  if (options.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const study::CompareTiming::Row& r : t.rows())
      rows.push_back({{"part", r.name}, {"wall_s", r.wall_s}, {"cpu_s", r.cpu_s}});
    fmt::print("{}\n", nlohmann::json{{"benchmark", "compare"},
                                      {"config", options.config},
                                      {"kernels", kernels::active_isa_name()},
                                      {"jobs", t.jobs},
                                      {"wall_s", t.wall_s},
                                      {"slot_s", t.slot_seconds()},
                                      {"cpu_s", t.cpu_seconds()},
                                      {"finished_runs", t.finished_runs},
                                      {"other_runs", t.other_runs},
                                      {"steps_wall_share", t.steps_wall_share()},
                                      {"steps_cpu_share", t.steps_cpu_share()},
                                      {"report_s", t.report_s},
                                      {"load_average_before", load_before},
                                      {"load_average_after", load_after},
                                      {"parts", rows}}
                           .dump());
    return;
  }
  fmt::print(
      "compare of {}: {} run(s) trained at --jobs {}, kernels {}, {:.2f} s wall ({:.2f} run-slot s), "
      "{:.2f} s CPU\nload average before {}, after {}\n",
      options.config, t.finished_runs, t.jobs, kernels::active_isa_name(), t.wall_s, t.slot_seconds(), t.cpu_seconds(),
      load_before, load_after);
  fmt::print("  {:<52} {:>9} {:>7} {:>9} {:>7}\n", "part", "wall s", "wall %", "CPU s", "CPU %");
  for (const study::CompareTiming::Row& r : t.rows())
    fmt::print("  {:<52} {:>9.3f} {:>6.1f}% {:>9.3f} {:>6.1f}%\n", r.name, r.wall_s,
               t.slot_seconds() > 0 ? 100.0 * r.wall_s / t.slot_seconds() : 0.0, r.cpu_s,
               t.cpu_seconds() > 0 ? 100.0 * r.cpu_s / t.cpu_seconds() : 0.0);
  fmt::print("training steps: {:.1f}% of the wall time, {:.1f}% of the CPU time\n", 100.0 * t.steps_wall_share(),
             100.0 * t.steps_cpu_share());
}

}  // namespace

void add_bench_compare(CLI::App& bench) {
  auto options = std::make_shared<BenchCompareOptions>();
  CLI::App* cmd = bench.add_subcommand("compare", "Train a compare and say where its wall time went");
  cmd->add_option("--config", options->config, "Compare config (as for normlab compare)")->required();
  cmd->add_option("--out", options->out, "Output directory (default: a temporary one, removed afterwards)");
  cmd->add_option("--jobs", options->jobs, "Runs in parallel, each single-threaded")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
