// The study verbs as a user runs them: compare never reuses a run trained with another config
// (exit 2 naming it, --retrain-changed retrains exactly those), --report-only refuses the same way,
// --shard splits the grid, `report` draws any run directories, and the messages around them
// (wrong kind of config, the train banner, CLI errors with hints, predict's warnings and --json).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

namespace fs = std::filesystem;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

struct Result {
  int code = -1;
  std::string out, err;
};

Result run_cli(const TempDir& dir, const std::string& args) {
  const std::string out = dir.sub("stdout.txt"), err = dir.sub("stderr.txt");
  const std::string command = std::string("\"") + NORMLAB_BINARY + "\" " + args + " >\"" + out + "\" 2>\"" + err + "\"";
  const int status = std::system(command.c_str());
  Result result;
  result.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_text(out);
  result.err = read_text(err);
  return result;
}

const char* kBase = R"({
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 12, "batch_size": 8, "eval_every": 6, "log_every": 4, "diagnostics_every": 4,
            "checkpoint_every": 6, "threads": 1}
})";

std::string compare_config(const std::string& set) {
  return R"({"base": "base.json", "set": )" + set + R"(, "grid": {"variants": ["none", "pre-ln"]}})";
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

TEST_CASE(
    "compare: an edited config is never reported over old runs - --retrain-changed retrains exactly the changed") {
  TempDir dir("normlab_stale");
  dir.write("base.json", kBase);
  const std::string config =
      dir.write("compare.json", compare_config(R"({"train.steps": 12, "optim.clip_grad_norm": 0})"));
  const std::string out = dir.sub("out");
  const std::string none_run = out + "/runs/none_lr0.01_L1_warmup_s0",
                    pre_run = out + "/runs/pre-ln_lr0.01_L1_warmup_s0";
  Result first = run_cli(dir, "compare --config " + config + " --out " + out + " --jobs 2");
  INFO(first.err);
  REQUIRE(first.code == 0);
  const int64_t pre_time = mtime_ns(pre_run + "/summary.json");

  // The issue's repro: fewer steps and clipping on, same --out.
  dir.write("compare.json", compare_config(R"({"train.steps": 10, "optim.clip_grad_norm": 1.0})"));
  Result stale = run_cli(dir, "compare --config " + config + " --out " + out + " --jobs 2");
  CHECK(stale.code == 2);
  CHECK(stale.err.find("normlab: error: " + none_run + ": was trained with another config") != std::string::npos);
  CHECK(stale.err.find("optim.clip_grad_norm: 0.0 -> 1.0, train.steps: 12 -> 10") != std::string::npos);
  CHECK(stale.err.find("2 started run(s) differ") != std::string::npos);
  CHECK(stale.err.find("--retrain-changed") != std::string::npos);
  CHECK(mtime_ns(pre_run + "/summary.json") == pre_time);  // nothing trained
  Result report_only = run_cli(dir, "compare --config " + config + " --out " + out + " --report-only");
  CHECK(report_only.code == 2);
  CHECK(report_only.err.find("was trained with another config") != std::string::npos);

  // Back to the first config, but one run's stored config says it was trained differently: only it is retrained.
  dir.write("compare.json", compare_config(R"({"train.steps": 12, "optim.clip_grad_norm": 0})"));
  nlohmann::json stored = nlohmann::json::parse(read_text(none_run + "/config.json"));
  stored["optim"]["weight_decay"] = 0.5;
  std::ofstream(none_run + "/config.json") << stored.dump();
  Result refused = run_cli(dir, "compare --config " + config + " --out " + out + " --jobs 2");
  CHECK(refused.code == 2);
  CHECK(refused.err.find("optim.weight_decay: 0.5 -> 0.01") != std::string::npos);
  CHECK(refused.err.find("1 started run(s) differ") != std::string::npos);
  Result retrain = run_cli(dir, "compare --config " + config + " --out " + out + " --jobs 2 --retrain-changed");
  INFO(retrain.err);
  CHECK(retrain.code == 0);
  CHECK(retrain.err.find("retraining 1 run(s) whose config changed (first: none_lr0.01_L1_warmup_s0)") !=
        std::string::npos);
  CHECK(retrain.err.find("1/1 runs done (0 diverged, 0 failed, 1 skipped as finished)") != std::string::npos);
  CHECK(mtime_ns(pre_run + "/summary.json") == pre_time);  // the unchanged run was kept
  CHECK(nlohmann::json::parse(read_text(none_run + "/config.json"))["optim"]["weight_decay"] == 0.01);
  CHECK(run_cli(dir, "compare --config " + config + " --out " + out + " --report-only").code == 0);
  CHECK(run_cli(dir, "compare --config " + config + " --out " + out + " --report-only --retrain-changed").code == 2);

  // The report and summary.json of the comparison say what produced them.
  const std::string report = read_text(out + "/report.md");
  CHECK(report.find("Produced by normlab ") != std::string::npos);
  CHECK(report.find("## Findings") != std::string::npos);
  CHECK(report.find("uniform-guess loss 2.303") != std::string::npos);
  CHECK(report.find("## Answer") < report.find("## Findings"));
  const nlohmann::json summary = nlohmann::json::parse(read_text(out + "/summary.json"));
  CHECK(summary["threads"] == nlohmann::json::array({1}));
  CHECK(summary.contains("cpu"));
  CHECK(summary["answer"].is_array());
  CHECK(!summary["answer"].empty());

  // eval on the compare directory says what it is and lists its runs.
  Result eval = run_cli(dir, "eval --run " + out);
  CHECK(eval.code == 2);
  CHECK(eval.err.find("is a compare output directory, not a run; its runs are in " + out +
                      "/runs/: none_lr0.01_L1_warmup_s0, pre-ln_lr0.01_L1_warmup_s0") != std::string::npos);

  // `normlab report` on a compare directory plus a hand-made run of the same task.
  const std::string hand = dir.sub("hand");
  REQUIRE(run_cli(dir, "train --config " + dir.sub("base.json") + " --set model.norm=rmsnorm --out " + hand).code == 0);
  Result both = run_cli(dir, "report " + out + " " + hand + " --out " + dir.sub("rep") + " --label mine=" + hand);
  INFO(both.err);
  CHECK(both.code == 0);
  CHECK(both.out.find("report: 3 run(s) in 3 series") != std::string::npos);
  const std::string csv = read_text(dir.sub("rep") + "/runs.csv");
  CHECK(csv.find("\nhand,mine,rmsnorm,pre,") != std::string::npos);
  CHECK(csv.find("\"model.norm=none, optim.clip_grad_norm=0.0") == std::string::npos);  // hand-made differs by more
  // Runs of another task: refused, naming both.
  const std::string sort_run = dir.sub("sort");
  REQUIRE(run_cli(dir, "train --config " + dir.sub("base.json") + " --set task.name=sort --out " + sort_run).code == 0);
  Result mixed = run_cli(dir, "report " + hand + " " + sort_run + " --out " + dir.sub("rep2"));
  CHECK(mixed.code == 2);
  CHECK(mixed.err.find("trains task \"sort\"") != std::string::npos);
  // One run alone: its own curves.
  Result one = run_cli(dir, "report " + hand + " --out " + dir.sub("rep3"));
  CHECK(one.code == 0);
  CHECK(read_text(dir.sub("rep3") + "/report.html").find("<svg") != std::string::npos);
}

TEST_CASE("compare: --shard I/K trains its share - --report-only over the merged output draws the whole report") {
  TempDir dir("normlab_shard");
  dir.write("base.json", kBase);
  const std::string config =
      dir.write("compare.json",
                R"({"base": "base.json", "grid": {"variants": ["none", "pre-ln", "rmsnorm"], "lr": [0.01]}})");
  const std::string out = dir.sub("out");
  Result zero = run_cli(dir, "compare --config " + config + " --out " + out + " --shard 0/2 --jobs 2");
  INFO(zero.err);
  REQUIRE(zero.code == 0);
  CHECK(zero.err.find("no report drawn") != std::string::npos);
  CHECK(fs::exists(out + "/runs/none_lr0.01_L1_warmup_s0/summary.json"));
  CHECK_FALSE(fs::exists(out + "/runs/pre-ln_lr0.01_L1_warmup_s0"));
  CHECK(fs::exists(out + "/runs/rmsnorm_lr0.01_L1_warmup_s0/summary.json"));
  CHECK_FALSE(fs::exists(out + "/report.html"));
  REQUIRE(run_cli(dir, "compare --config " + config + " --out " + out + " --shard 1/2").code == 0);
  CHECK(fs::exists(out + "/runs/pre-ln_lr0.01_L1_warmup_s0/summary.json"));
  REQUIRE(run_cli(dir, "compare --config " + config + " --out " + out + " --report-only").code == 0);
  CHECK(read_text(out + "/report.md").find("3 of 3 runs finished") != std::string::npos);
  for (const char* bad : {"2/2", "x/2", "1", "0/0"}) {
    Result r = run_cli(dir, "compare --config " + config + " --out " + out + " --shard " + bad);
    CHECK_MESSAGE(r.code == 2, bad);
    CHECK(r.err.find("--shard") != std::string::npos);
  }
}

TEST_CASE("compare --report-only and report: a run file with a field of the wrong type is exit 2 naming the file") {
  TempDir dir("normlab_badfields");
  dir.write("base.json", kBase);
  const std::string config =
      dir.write("compare.json", R"({"base": "base.json", "grid": {"variants": ["pre-ln"], "lr": [0.01]}})");
  const std::string out = dir.sub("out");
  REQUIRE(run_cli(dir, "compare --config " + config + " --out " + out).code == 0);
  const std::string run = out + "/runs/pre-ln_lr0.01_L1_warmup_s0";
  std::ofstream(run + "/summary.json") << R"({"diverged":"yes"})";
  for (const std::string& args : {"compare --config " + config + " --out " + out + " --report-only",
                                  "report " + run + " --out " + dir.sub("rep")}) {
    Result r = run_cli(dir, args);
    CHECK(r.code == 2);
    CHECK(r.err.find("normlab: error: " + run + "/summary.json: diverged: must be true or false") != std::string::npos);
  }
}

TEST_CASE("messages: wrong kind of config, the train banner, CLI errors with hints, predict") {
  TempDir dir("normlab_messages");
  const std::string base = dir.write("base.json", kBase);
  const std::string compare = dir.write("demo.json", R"({"base": "base.json", "grid": {"lr": [0.01]}})");

  Result train_compare = run_cli(dir, "train --config " + compare);
  CHECK(train_compare.code == 2);
  CHECK(train_compare.err.find("is a compare config (base, set, grid), not a run config; run it with: normlab compare "
                               "--config " +
                               compare + " --out runs/demo") != std::string::npos);
  Result compare_run = run_cli(dir, "compare --config " + base + " --out " + dir.sub("x"));
  CHECK(compare_run.code == 2);
  CHECK(compare_run.err.find("is a run config") != std::string::npos);

  Result steps = run_cli(dir, "train --config " + base + " --steps 100");
  CHECK(steps.code == 2);
  CHECK(steps.err.rfind("normlab: error: ", 0) == 0);
  CHECK(steps.err.find("use --set train.steps=100") != std::string::npos);
  Result cross = run_cli(dir, "train --config " + base + " --set task.max_len=100 --out " + dir.sub("never"));
  CHECK(cross.code == 2);
  CHECK(cross.err.find("normlab: error: --set task.max_len=100: task.max_len: must be <= model.max_len") !=
        std::string::npos);
  Result help = run_cli(dir, "help");
  CHECK(help.code == 0);
  for (const char* verb : {"train", "eval", "predict", "compare", "report", "bench"})
    CHECK_MESSAGE(help.out.find(verb) != std::string::npos, verb);
  Result unknown = run_cli(dir, "trian --config x");
  CHECK(unknown.code == 2);
  CHECK(unknown.err.find("normlab: error: unknown command 'trian' (did you mean 'train'?); the commands are: ") !=
        std::string::npos);
  CHECK(unknown.err.find("compare, report") != std::string::npos);
  Result nothing = run_cli(dir, "");
  CHECK(nothing.code == 2);
  CHECK(nothing.err.rfind("normlab: error: ", 0) == 0);

  const std::string run = dir.sub("run");
  Result none_post =
      run_cli(dir, "train --config " + base + " --set model.norm=none --set model.placement=post --out " + run);
  CHECK(none_post.code == 0);
  CHECK(none_post.err.find("block: x = x + f(x) (no normalization) (model.placement=post has no effect with "
                           "model.norm=none)") != std::string::npos);
  Result pre = run_cli(dir, "train --config " + base + " --out " + dir.sub("pre"));
  CHECK(pre.err.find("block: x = x + f(LN(x)) (pre-norm, final LN after the stack)") != std::string::npos);

  Result json = run_cli(dir, "predict --run " + run + " --input '1 2 3' --json");
  REQUIRE(json.code == 0);
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  REQUIRE(parsed["tags"].is_array());
  CHECK(parsed["tags"].size() == 3);
  CHECK(parsed["tags"][0].is_string());
  CHECK(parsed["read_as"] == nlohmann::json::array({"1", "2", "3"}));
  CHECK(parsed["probabilities"].size() == 10);  // every digit's probability, one per position
  CHECK(parsed["probabilities"]["0"].size() == 3);
  CHECK(parsed["expected"] == nlohmann::json::array({"3", "2", "1"}));
  CHECK(parsed["warnings"].empty());
  Result longer = run_cli(dir, "predict --run " + run + " --input '1 2 3 4 5 6 7 8 9 1'");
  CHECK(longer.code == 0);
  CHECK(longer.err.find("normlab: warning: the input has 10 tokens, longer than any training sequence (8)") !=
        std::string::npos);
}

TEST_CASE("messages: predict on mlm_text says so when the input has no [MASK]") {
  TempDir dir("normlab_mlm_predict");
  std::string lines;
  for (const char* text : {"in the beginning", "the earth was without form", "and void", "let there be light"})
    lines += std::string(R"({"text": ")") + text + "\"}\n";
  dir.write("train.jsonl", lines);
  dir.write("valid.jsonl", lines);
  const std::string config = dir.write("mlm.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 32},
    "task": {"name": "mlm_text", "train_file": "train.jsonl", "valid_file": "valid.jsonl", "max_len": 32,
             "eval_max_len": 32, "eval_examples": 4, "bucket_width": 16},
    "train": {"steps": 2, "batch_size": 4, "eval_every": 0, "checkpoint_every": 0, "threads": 1}})");
  const std::string run = dir.sub("run");
  Result trained = run_cli(dir, "train --config " + config + " --out " + run);
  INFO(trained.err);
  REQUIRE(trained.code == 0);
  Result plain = run_cli(dir, "predict --run " + run + " --input 'the earth'");
  CHECK(plain.code == 0);
  CHECK(plain.err.find("normlab: warning: the input has no [MASK]: nothing to fill in") != std::string::npos);
  Result masked = run_cli(dir, "predict --run " + run + " --input 'the e[MASK]rth'");
  CHECK(masked.code == 0);
  CHECK(masked.err.find("no [MASK]") == std::string::npos);
}

TEST_CASE("compare with BatchNorm: the report evaluates the same checkpoints four ways - LayerNorm's rows are one") {
  TempDir dir("normlab_bn_section");
  dir.write("base.json", kBase);
  const std::string config = dir.write(
      "compare.json",
      R"({"base": "base.json", "set": {"train.steps": 12}, "grid": {"variants": ["pre-ln", "batchnorm"], "seeds": [0, 1]}})");
  const std::string out = dir.sub("out");
  Result result = run_cli(dir, "compare --config " + config + " --out " + out + " --jobs 2");
  INFO(result.err);
  REQUIRE(result.code == 0);
  CHECK(result.out.find("Answer (held-out data") != std::string::npos);
  const std::string report = read_text(out + "/report.md");
  const size_t section = report.find("## BatchNorm and its batch");
  REQUIRE(section != std::string::npos);
  // Table rows of the section: variant | at | normalized with | held-out batches | eval batch | n | trained acc | ...
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(report.substr(section));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| pre-ln |", 0) != 0 && line.rfind("| batchnorm |", 0) != 0) continue;
    std::vector<std::string> cells;
    std::istringstream fields(line.substr(1));
    for (std::string cell; std::getline(fields, cell, '|');) cells.push_back(cell);
    rows.push_back(cells);
  }
  // 2 variants x (running averages at 8; batch statistics at 8 on trained lengths only, at 8 on trained +
  // unseen lengths, at 1)
  REQUIRE(rows.size() == 8);
  CHECK(rows[0][2] == " running averages ");
  CHECK(rows[1][3].find("trained lengths only") != std::string::npos);
  CHECK(rows[2][3].find("trained + unseen lengths mixed") != std::string::npos);
  CHECK(rows[1][7] == " — ");  // no unseen length in trained-length batches
  CHECK(rows[3][4] == " 1 ");
  CHECK(rows[0][5] == " 2 ");  // both seeds
  for (size_t i : {1, 2, 3}) {
    CHECK(rows[i][6] == rows[0][6]);  // LayerNorm: the same held-out accuracy whatever the batch
    if (i != 1) CHECK(rows[i][7] == rows[0][7]);
    CHECK(rows[i][8] == " 0.0000 ");
  }
  CHECK(rows[4][0] == " batchnorm ");
  // The running-average evaluation is the one the trainer made: the summary table's cell.
  CHECK(report.find("| batchnorm | 0.01 | 2 (!) |") != std::string::npos);
  CHECK(report.find(rows[4][6] + "|", report.find("| batchnorm | 0.01 | 2 (!) |")) != std::string::npos);
  CHECK(fs::exists(out + "/curves.csv"));
  CHECK(fs::exists(out + "/charts/valid-accuracy-lr0.01.svg"));
}
