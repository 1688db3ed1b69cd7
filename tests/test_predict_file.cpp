// `normlab predict`'s and `normlab eval`'s work without their printing (train/predict_file.hpp,
// train::score_run): one input with its warnings, a file of records scored against their labels, a
// file of raw lines, and the evaluation with its intervals and baseline.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/predict_file.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using namespace normlab::train;
using normlab::test::TempDir;

namespace {

// One label a line, told by its first word: "good ..." is pos, "bad ..." neg.
std::string review_lines(int count, unsigned seed) {
  const char* nouns[] = {"film", "plot", "cast", "song"};
  std::string text;
  for (int i = 0; i < count; ++i) {
    const bool good = (seed + unsigned(i)) % 2 == 0;
    text += fmt::format("{{\"tokens\": \"{} {}\", \"label\": \"{}\"}}\n", good ? "good" : "bad",
                        nouns[(seed + 3u * unsigned(i)) % 4u], good ? "pos" : "neg");
  }
  return text;
}

LoadedRun trained_run(const TempDir& dir) {
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 8;
  c.task.name = data::TaskKind::sequence_classification;
  c.task.train_file = dir.write("train.jsonl", review_lines(32, 1));
  c.task.valid_file = dir.write("valid.jsonl", review_lines(12, 2));
  c.task.max_len = 4;
  c.task.eval_max_len = 4;
  c.task.bucket_width = 0;
  c.optim.lr = 0.01;
  c.optim.warmup_steps = 2;
  c.train.steps = 6;
  c.train.batch_size = 8;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  c.train.threads = 1;
  check_config(c, "reviews");
  {
    Trainer trainer(c);
    trainer.start(dir.sub("run"));
    trainer.fit();
  }
  return load_run(dir.sub("run"));
}

// The calls a PredictionWriter receives, in order, and the predictions it was handed.
struct Recorder {
  std::vector<std::string> calls;
  std::vector<LinePrediction> seen;
  PredictionWriter writer() {
    return {[this](bool with_expected) { calls.push_back(with_expected ? "start, labelled" : "start"); },
            [this](const PredictedGroup& group) {
              calls.push_back(fmt::format("group of {}", group.predictions.size()));
              seen.insert(seen.end(), group.predictions.begin(), group.predictions.end());
            }};
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("predict_file: a file's records are predicted as predict_lines predicts them, and scored") {
  TempDir dir;
  LoadedRun run = trained_run(dir);
  const std::string path = dir.write("new.jsonl", R"({"tokens": "good film", "label": "pos"}
{"tokens": "bad plot", "label": "neg"}
{"tokens": "good zebra", "label": "neg"}
)");
  Recorder recorder;
  const std::string contents = read_predict_source(run, path, true);
  const FileTally tally = predict_file(run, contents, path, true, 2, recorder.writer());
  CHECK(recorder.calls == std::vector<std::string>{"start, labelled", "group of 3"});
  const std::vector<LinePrediction> direct = predict_lines(run, {"good film", "bad plot", "good zebra"}, 2);
  REQUIRE(recorder.seen.size() == 3);
  Confusion confusion(run.task.num_classes());
  for (size_t i = 0; i < 3; ++i) {
    CHECK(recorder.seen[i].line == int64_t(i) + 1);
    CHECK(recorder.seen[i].predicted == direct[i].predicted);
    CHECK(recorder.seen[i].probability == direct[i].probability);
    confusion.add(*run.task.output_vocab.find(i == 0 ? "pos" : "neg"), direct[i].predicted[0]);
  }
  CHECK(tally.predicted == 3);
  CHECK(tally.failed == 0);
  CHECK(tally.unknown == 1);  // "zebra"
  CHECK(tally.labelled == 3);
  CHECK(tally.confusion.cells == confusion.cells);
}

TEST_CASE("predict_file: a label the run lacks stops the file after start, before its group is handed on") {
  TempDir dir;
  LoadedRun run = trained_run(dir);
  const std::string path = dir.write("new.jsonl",
                                     "{\"tokens\": \"good film\", \"label\": \"pos\"}\n"
                                     "{\"tokens\": \"bad plot\", \"label\": \"meh\"}\n");
  Recorder recorder;
  const std::string contents = read_predict_source(run, path, true);
  CHECK(error_of([&] { predict_file(run, contents, path, true, 4, recorder.writer()); }) ==
        fmt::format("{}:2: label \"meh\" is not one of the run's classes (neg pos)", path));
  CHECK(recorder.calls == std::vector<std::string>{"start, labelled"});
}

TEST_CASE("predict_file: raw lines, CRLF and invalid UTF-8 counted, and the sources refused") {
  TempDir dir;
  LoadedRun run = trained_run(dir);
  const std::string path = dir.write("new.txt", "good film\r\nbad \xff plot\n\nbad song");
  Recorder recorder;
  const FileTally tally = predict_file(run, read_predict_source(run, path, false), path, false, 256, recorder.writer());
  CHECK(recorder.calls == std::vector<std::string>{"start", "group of 4"});
  REQUIRE(recorder.seen.size() == 4);
  CHECK(recorder.seen[0].input == "good film");
  CHECK(recorder.seen[1].input == "bad \xEF\xBF\xBD plot");
  CHECK_FALSE(recorder.seen[2].error.empty());  // an empty line cannot be read; the others are unaffected
  CHECK(recorder.seen[3].line == 4);
  CHECK(tally.replaced == 1);
  CHECK(tally.failed == 1);
  CHECK(tally.predicted == 3);
  CHECK(tally.labelled == 0);
  // --data reads the task's formats by extension; an empty file has nothing to predict.
  CHECK(error_of([&] { read_predict_source(run, path, true); }).find("for one raw input a line use --lines") !=
        std::string::npos);
  const std::string empty = dir.write("empty.jsonl", "");
  CHECK(error_of([&] { read_predict_source(run, empty, true); }) == empty + ": no input lines");
}

TEST_CASE("predict_input: one input, its warnings, and the inputs refused outright") {
  TempDir dir;
  LoadedRun run = trained_run(dir);
  const InputPrediction one = predict_input(run, "good \xff film");
  CHECK(one.input == "good \xEF\xBF\xBD film");
  CHECK(one.prediction.predicted.size() == 1);
  CHECK(one.prediction.predicted == predict_lines(run, {one.input}, 1).front().predicted);
  CHECK_FALSE(one.expected.has_value());  // own data: no rule gives the answer
  REQUIRE(one.warnings.size() == 2);
  CHECK(one.warnings[0] == "--input: 1 invalid UTF-8 sequence read as U+FFFD");
  CHECK(one.warnings[1].find("the input has 3 tokens, longer than any training sequence (2)") == 0);
  CHECK(error_of([&] { predict_input(run, "good film good film good film good film good"); }) ==
        "--input: 9 tokens is longer than this model's model.max_len 8");
}

TEST_CASE("score_run: own data's intervals come from the evaluation's confusion, and the baseline when asked") {
  TempDir dir;
  LoadedRun run = trained_run(dir);
  const ScoredEvaluation scored = score_run(run, std::nullopt, EvalSettings{});
  CHECK(scored.own_data);
  const HeldOutScore expected = held_out_score(scored.evaluation.metrics.confusion);
  CHECK(scored.model.examples == 12);
  CHECK(scored.model.accuracy == expected.accuracy);
  CHECK(scored.model.macro_f1_low == expected.macro_f1_low);
  REQUIRE(scored.baseline.has_value());
  CHECK(scored.baseline->examples == 12);
  CHECK_FALSE(score_run(run, std::nullopt, EvalSettings{}, false).baseline.has_value());
}
