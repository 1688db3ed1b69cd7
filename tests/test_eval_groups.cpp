// The evaluation schema: every validation record splits its buckets into trained and unseen
// lengths, with majority-label and uniform baselines; best_valid is chosen on trained lengths.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using namespace normlab::train;
using nlohmann::json;
using normlab::test::TempDir;

namespace {

std::vector<json> valid_records(const std::string& metrics_path) {
  std::vector<json> records;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    json record = json::parse(line);
    if (record.value("split", "") == "valid") records.push_back(record);
  }
  return records;
}

// The target-weighted sum of the buckets with beyond_train == beyond, computed here independently.
void check_group(const json& record, const char* key, bool beyond) {
  double targets = 0, loss = 0, correct = 0, sequences = 0, sequences_right = 0;
  for (const json& b : record.at("buckets")) {
    if (b.at("beyond_train").get<bool>() != beyond || b.at("targets").get<int64_t>() == 0) continue;
    const double t = b.at("targets").get<double>();
    targets += t;
    loss += b.at("loss").get<double>() * t;
    correct += b.at("accuracy").get<double>() * t;
    sequences += b.at("count").get<double>();
    sequences_right += b.at("sequence_accuracy").get<double>() * b.at("count").get<double>();
  }
  const json& group = record.at(key);
  if (targets == 0) {
    CHECK(group.is_null());
    return;
  }
  REQUIRE(group.is_object());
  CHECK(group.at("targets").get<double>() == targets);
  CHECK(group.at("sequences").get<double>() == sequences);
  CHECK(group.at("loss").get<double>() == doctest::Approx(loss / targets).epsilon(1e-12));
  CHECK(group.at("accuracy").get<double>() == doctest::Approx(correct / targets).epsilon(1e-12));
  CHECK(group.at("sequence_accuracy").get<double>() == doctest::Approx(sequences_right / sequences).epsilon(1e-12));
}

RunConfig majority_file_config(const TempDir& dir) {
  // Training labels: "1" three times out of four, so the majority label is "1"; lengths 1-6.
  std::string train, valid;
  for (int i = 0; i < 64; ++i) {
    const int length = 1 + i % 6;
    std::string tokens;
    for (int t = 0; t < length; ++t) tokens += std::string(t ? "," : "") + (((i + t) % 3) ? "\"1\"" : "\"0\"");
    train += fmt::format("{{\"tokens\":[{}],\"label\":\"{}\"}}\n", tokens, i % 4 == 0 ? "0" : "1");
  }
  // Validation: lengths 1-10, label "1" on lengths 1-6 only when the index is even, never beyond.
  for (int i = 0; i < 40; ++i) {
    const int length = 1 + i % 10;
    std::string tokens;
    for (int t = 0; t < length; ++t) tokens += std::string(t ? "," : "") + "\"0\"";
    const bool one = length <= 6 && i % 2 == 0;
    valid += fmt::format("{{\"tokens\":[{}],\"label\":\"{}\"}}\n", tokens, one ? "1" : "0");
  }
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::majority;
  c.task.train_file = dir.write("train.jsonl", train);
  c.task.valid_file = dir.write("valid.jsonl", valid);
  c.task.min_len = 1;
  c.task.max_len = 16;
  c.task.eval_max_len = 10;
  c.task.eval_examples = 40;
  c.task.bucket_width = 4;
  c.optim.lr = 0.01;
  c.optim.warmup_steps = 2;
  c.train.steps = 12;
  c.train.batch_size = 8;
  c.train.eval_every = 3;
  c.train.checkpoint_every = 0;
  c.train.threads = 1;
  check_config(c, "majority_file");
  return c;
}

}  // namespace

TEST_CASE("eval groups: trained and unseen sum their buckets - the longest training length counts as trained") {
  TempDir dir;
  RunConfig config = majority_file_config(dir);
  Trainer trainer(config);
  trainer.start(dir.sub("run"));
  trainer.fit();
  const std::vector<json> records = valid_records(dir.sub("run/metrics.jsonl"));
  REQUIRE(records.size() == 4);
  for (const json& record : records) {
    check_group(record, "trained", false);
    check_group(record, "unseen", true);
    // Training lengths are 1-6: buckets 1-4 and 5-6 are trained (6 included), 7-8 and 9-10 unseen.
    const json& buckets = record.at("buckets");
    REQUIRE(buckets.size() == 4);
    CHECK(buckets[1].at("max_len") == 6);
    CHECK(buckets[1].at("beyond_train") == false);
    CHECK(buckets[2].at("min_len") == 7);
    CHECK(buckets[2].at("beyond_train") == true);
    // Two labels: chance is ln 2 and 1/2.
    CHECK(record.at("uniform_loss").get<double>() == doctest::Approx(std::log(2.0)));
    CHECK(record.at("uniform_accuracy").get<double>() == 0.5);
    // The majority label of the training file is "1": on trained lengths half the validation
    // labels are "1" (even i, 24 sequences of lengths 1-6 -> 12), on unseen lengths none.
    CHECK(record.at("trained").at("targets") == 24);
    CHECK(record.at("trained").at("majority_accuracy").get<double>() == 0.5);
    CHECK(record.at("unseen").at("majority_accuracy").get<double>() == 0.0);
  }
}

TEST_CASE("eval groups: best_valid is the evaluation with the lowest trained-length loss, earliest on ties") {
  TempDir dir;
  RunConfig config = majority_file_config(dir);
  config.train.steps = 30;
  config.train.eval_every = 2;
  Trainer trainer(config);
  trainer.start(dir.sub("run"));
  trainer.fit();
  const std::vector<json> records = valid_records(dir.sub("run/metrics.jsonl"));
  REQUIRE(records.size() == 15);
  const json* best = nullptr;
  const json* best_accuracy = nullptr;
  for (const json& r : records) {
    if (!best || r.at("trained").at("loss").get<double>() < best->at("trained").at("loss").get<double>()) best = &r;
    if (!best_accuracy ||
        r.at("trained").at("accuracy").get<double>() > best_accuracy->at("trained").at("accuracy").get<double>())
      best_accuracy = &r;
  }
  const json summary = json::parse(test::read_text(dir.sub("run/summary.json")));
  CHECK(summary.at("best_valid").at("step") == best->at("step"));
  CHECK(summary.at("best_valid").at("trained") == best->at("trained"));
  CHECK(summary.at("best_valid").at("unseen") == best->at("unseen"));
  CHECK(summary.at("best_valid_accuracy").at("step") == best_accuracy->at("step"));
  CHECK(summary.at("final_valid").at("trained") == records.back().at("trained"));
  CHECK(summary.at("final_valid").at("unseen") == records.back().at("unseen"));
}

TEST_CASE("eval groups: generated tasks have a majority baseline, and normlab eval reports the same groups") {
  TempDir dir;
  RunConfig c;
  c.model.d_model = 16;
  c.model.num_heads = 2;
  c.model.num_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.max_len = 16;
  c.task.name = data::TaskKind::brackets;
  c.task.max_len = 6;
  c.task.eval_max_len = 12;
  c.task.eval_examples = 32;
  c.task.bucket_width = 4;
  c.train.steps = 4;
  c.train.batch_size = 8;
  c.train.eval_every = 0;
  c.train.threads = 1;
  check_config(c, "brackets");
  Trainer trainer(c);
  trainer.start(dir.sub("run"));
  trainer.fit();
  const json last = valid_records(dir.sub("run/metrics.jsonl")).back();
  // brackets: 17 classes; depth 1 is the commonest label of short random walks.
  CHECK(last.at("uniform_accuracy").get<double>() == doctest::Approx(1.0 / 17));
  REQUIRE(last.at("trained").at("majority_accuracy").is_number());
  CHECK(last.at("trained").at("majority_accuracy").get<double>() > 1.0 / 17);
  LoadedRun run = load_run(dir.sub("run"));
  CHECK(run.baselines.majority_label == run.task.output_vocab.id("1"));
  const RunEvaluation evaluation = evaluate_run(run, std::nullopt);
  const json evaluated = to_json(evaluation.metrics);
  CHECK(evaluated.at("trained").at("majority_accuracy") == last.at("trained").at("majority_accuracy"));
  CHECK(evaluated.at("unseen").at("targets") == last.at("unseen").at("targets"));
  // The share of the commonest prediction on trained lengths (a collapsed model answers one label: 1).
  const double top = last.at("trained").at("top_prediction_share").get<double>();
  CHECK(top >= 1.0 / 17);
  CHECK(top <= 1.0);
  CHECK(evaluated.at("trained").at("top_prediction_share") == last.at("trained").at("top_prediction_share"));
  CHECK(last.at("unseen").at("top_prediction_share").is_null());
}
