// normlab report RUN_DIR... --out DIR [--label NAME=RUN_DIR]...
//
// The compare report (report.html, report.md, runs.csv, summary.json) for any run directories:
// runs trained by hand, a folder of them, a compare output directory (its runs/), or one run alone.
#include <fmt/core.h>

#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/serve/live.hpp"
#include "normlab/study/report.hpp"

namespace normlab::cli {

namespace {

struct ReportOptions {
  std::vector<std::string> run_dirs;
  std::string out;
  std::vector<std::string> labels;  // NAME=RUN_DIR
};

void run(const ReportOptions& options) {
  std::vector<std::pair<std::string, std::string>> labels;
  for (const std::string& text : options.labels) {
    const auto equals = text.find('=');  // run names may hold '=' (grid keys); labels may not
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size())
      throw InputError(fmt::format("--label {}: expected NAME=RUN_DIR, e.g. --label no-norm=runs/a", text));
    labels.emplace_back(text.substr(0, equals), text.substr(equals + 1));
  }
  // A directory that cannot be read is the user's to fix: one line naming it, exit 2.
  for (const std::string& dir : options.run_dirs)
    if (std::string why = serve::cannot_read(dir); !why.empty()) throw InputError(why);
  io::install_stop_signals();
  study::RunDirsReport report;
  try {
    report = study::report_run_dirs(options.run_dirs, labels, options.out,
                                    [] { return io::stop_signal(io::stop_flag()) != 0; });
  } catch (const study::ReportStopped&) {
    fmt::print(stderr, "report: stopped before the report was complete; nothing was written over\n");
    throw ExitCode{exit_code_for_signal(io::stop_signal(io::stop_flag()))};
  }
  fmt::print("Answer (held-out data; definitions in docs/compare.md):\n");
  for (const std::string& sentence : report.answer) fmt::print("  {}\n", sentence);
  fmt::print("report: {} run(s) in {} series; written to {}\n", report.runs, report.series, report.report_path);
}

}  // namespace

void add_report(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand("report", "Write the comparison report for any run directories");
  cmd->add_option("run_dirs", options->run_dirs,
                  "Run directories, folders of run directories, or compare output directories (their runs/)")
      ->required();
  cmd->add_option("--out", options->out, "Output directory: report.html, report.md, runs.csv, summary.json")
      ->required();
  cmd->add_option("--label", options->labels,
                  "NAME=RUN_DIR: the series name of that run (default: the config keys that differ between the runs)")
      ->allow_extra_args(false);  // one value per --label, so it may stand before the run directories
  cmd->footer(
      "Runs with the same label and learning rate are one series (median and band over their seeds).\n"
      "All runs must train the same task; runs of different tasks are refused (exit 2).");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
