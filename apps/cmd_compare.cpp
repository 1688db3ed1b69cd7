// normlab compare --config FILE --out DIR [--jobs N] [--report-only] [--retrain-changed] [--shard I/K]
//
// Trains the grid as child processes and draws the report: study::run_compare (study/scheduler.hpp).
// This file parses the flags, prints the progress and the Answer, and turns the outcome into an exit code.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.hpp"
#include "normlab/error.hpp"
#include "normlab/io/stop.hpp"
#include "normlab/io/text.hpp"
#include "normlab/study/scheduler.hpp"

namespace normlab::cli {

namespace {

// Progress on stderr: one redrawn line on a terminal, plain lines otherwise.
class ConsoleCompareLogger : public study::CompareLogger {
 public:
  // Notes and progress may echo paths and run names: printed with their control bytes escaped.
  void note(const std::string& line) override { fmt::print(stderr, "{}\n", io::escape_control_lines(line)); }
  void progress(const std::string& line, bool final_line) override {
    if (terminal_) {
      fmt::print(stderr, "\r\033[K{}{}", io::escape_control(line), final_line ? "\n" : "");
    } else {
      fmt::print(stderr, "{}\n", io::escape_control_lines(line));
    }
  }
  bool redraws() const override { return terminal_; }

 private:
  const bool terminal_ = isatty(STDERR_FILENO);
};

// Trains what the grid still needs, then draws the report (a shard draws none); says how it ended.
void run(const study::CompareOptions& options) {
  io::install_stop_signals();
  ConsoleCompareLogger logger;
  const study::CompareResult result = study::run_compare(options, logger, io::stop_flag());
  if (result.report_stopped) {
    fmt::print(stderr, "compare: stopped while drawing the report; rerun with --report-only to draw it\n");
    throw ExitCode{exit_code_for_signal(result.stop_signal)};
  }
  if (!result.report_drawn) {
    fmt::print(stderr,
               "compare: shard {}: no report drawn; when every shard is done (shards on other machines: their runs/ "
               "gathered into one --out), run: normlab compare --config {} --out {} --report-only\n",
               options.shard, options.config, options.out);
  } else {
    fmt::print("Answer (held-out data; definitions in docs/compare.md):\n");
    for (const std::string& sentence : result.answer) fmt::print("  {}\n", sentence);
    fmt::print("compare: report written to {}\n", result.report_path);
  }
  for (const std::string& failure : result.failures) fmt::print(stderr, "compare: run {}\n", failure);
  if (result.timing.finished_runs > 0) fmt::print(stderr, "{}\n", result.timing.summary_line());
  if (!result.bad_input.empty()) throw InputError(result.bad_input);
  if (result.stop_signal != 0) {
    fmt::print(stderr, "compare: interrupted; run the same command again to resume the unfinished runs\n");
    throw ExitCode{exit_code_for_signal(result.stop_signal)};
  }
  if (result.failed > 0) {
    fmt::print(stderr, "compare: {} run(s) failed; their logs are in {}\n", result.failed,
               (std::filesystem::path(options.out) / "logs").string());
    throw ExitCode{1};
  }
}

}  // namespace

void add_compare(CLI::App& app) {
  auto options = std::make_shared<study::CompareOptions>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train a grid of runs (normalization variant x lr x seed x depth x warmup) and write a report");
  cmd->add_option("--config", options->config, "Compare config (JSON: base, set, grid, search); see docs/compare.md")
      ->required();
  cmd->add_option("--out", options->out, "Output directory: runs/, report.html, report.md, runs.csv")->required();
  cmd->add_option("--jobs", options->jobs, "Runs in parallel, each single-threaded (default: one per core)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--report-only", options->report_only, "Do not train; redraw the report from what is in --out");
  cmd->add_flag("--retrain-changed", options->retrain_changed,
                "Retrain (from scratch) the runs in --out whose config differs from the grid's; keep the others");
  cmd->add_option("--shard", options->shard, "I/K: train only the runs whose index is I modulo K (no report)");
  cmd->footer(
      "Rerunning with the same --out skips finished runs and resumes interrupted ones whose config is the\n"
      "one asked for; a run trained with another config stops the command (exit 2) unless --retrain-changed.\n"
      "Ctrl-C stops every running run with a checkpoint (exit 130).");
  cmd->callback([options] {
    // Each run calls the command line in a forked process rather than exec'ing the binary again.
    options->train_entry = [](const std::vector<std::string>& args) { return run_command_line(args); };
    run(*options);
  });
}

}  // namespace normlab::cli
