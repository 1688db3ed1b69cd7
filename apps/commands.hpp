#pragma once
// One function per subcommand; each adds itself to the CLI and sets its own callback.
// The callbacks throw normlab::InputError for bad input; main() turns that into exit code 2.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "normlab/train/saved_run.hpp"
#include "normlab/train/session.hpp"

namespace normlab::cli {
void add_bench_layernorm(CLI::App& bench);  // bench/cmd/layernorm.cpp
void add_bench_gemm(CLI::App& bench);       // bench/cmd/gemm.cpp
void add_bench_step(CLI::App& bench);       // bench/cmd/step.cpp
void add_bench_attention(CLI::App& bench);  // bench/cmd/attention.cpp
void add_bench_sha256(CLI::App& bench);     // bench/cmd/sha256.cpp
void add_bench_predict(CLI::App& bench);    // bench/cmd/predict.cpp
void add_bench_compare(CLI::App& bench);    // bench/cmd/compare.cpp
void add_train(CLI::App& app);              // apps/cmd_train.cpp
void add_eval(CLI::App& app);               // apps/cmd_eval.cpp
void add_predict(CLI::App& app);            // apps/cmd_predict.cpp
void add_compare(CLI::App& app);            // apps/cmd_compare.cpp
void add_report(CLI::App& app);             // apps/cmd_report.cpp
void add_serve(CLI::App& app);              // apps/cmd_serve.cpp
void add_baseline(CLI::App& app);           // apps/cmd_baseline.cpp
void add_completion(CLI::App& app);         // apps/cli_habits.cpp: `normlab completion bash`

// apps/cli_habits.cpp: what is generated from the command table.
std::string closest_command(const CLI::App& app, const std::string& typed);  // "" if none is near
// "normlab train: unknown option '--confg'; did you mean '--config'? ...", or "" (no near option,
// or a config key, which has its own --set hint).
std::string unknown_option_message(const CLI::App& app, int argc, char** argv);
std::string bash_completion(const CLI::App& app);
std::string man_page(const CLI::App& app, const std::string& version);  // roff, man(7)

// InputError if `dir` is a compare output directory (names its runs); eval and predict call it.
void refuse_compare_dir(const std::string& dir, const char* verb);  // apps/cmd_eval.cpp
// --checkpoint best|last for eval and predict (default: the best when the run kept one); apps/cmd_eval.cpp.
void add_checkpoint_option(CLI::App& cmd, std::string& choice);
train::CheckpointChoice checkpoint_choice(const std::string& choice);

// Exit codes shared by all subcommands: the training session's (train/session.hpp).
using train::exit_code_for_signal;
using train::kExitBadInput;
using train::kExitDiverged;
using train::kExitInterrupted;
using train::kExitOk;
using train::kExitTerminated;
// A subcommand that wants a non-zero exit without an error (train: diverged) throws this.
struct ExitCode {
  int code;
};

// The command line on argv (apps/normlab.cpp): parse, run the verb, turn its errors into one line
// and an exit code, which it returns. main() calls it; so does each run compare forks (args: the
// arguments after the program's name).
int run_command_line(int argc, char** argv);
int run_command_line(const std::vector<std::string>& args);
}  // namespace normlab::cli
