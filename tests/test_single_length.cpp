// A single-length regime (task.length_regime "single") trains on max_len alone: the report counts as
// trained exactly the lengths its batches held (the step records' shortest / longest), the shorter
// lengths as unseen, and BatchNorm's batch-statistics check uses the batches' real sequence count.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "normlab/data/buckets.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/train/config.hpp"
#include "normlab/train/saved_run.hpp"
#include "normlab/train/trainer.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// A finished run of a 10-label task, max_len 16, eval to 32: step records of batches of `sequences`
// sequences of lengths shortest..longest, then one evaluation whose trainer groups call 1-16 trained
// (accuracy 0.05, loss 30: "exploded" if those were the trained lengths) while the bucket of length
// 16 alone is solved and the shorter lengths are at the loss the whole trainer group shows.
study::RunResult read_fixture(const TempDir& dir, const std::string& regime, int shortest, int longest, int sequences) {
  std::string metrics;
  for (int step = 1; step <= 4; ++step)
    metrics += fmt::format(
        R"({{"step":{},"loss":2.0,"accuracy":0.5,"lr":0.001,"grad_norm":1.0,"tokens":272,"sequences":{},"shortest":{},"longest":{},"tokens_per_s":1}})"
        "\n",
        step, sequences, shortest, longest);
  metrics +=
      R"({"split":"valid","step":4,"loss":20.0,"accuracy":0.3,"targets":400,)"
      R"("trained":{"loss":30.0,"accuracy":0.05,"targets":200},"unseen":{"loss":9.0,"accuracy":0.0,"targets":200},)"
      R"("buckets":[{"min_len":1,"max_len":12,"beyond_train":false,"loss":35.0,"accuracy":0.0,"count":10,"targets":100},)"
      R"({"min_len":13,"max_len":15,"beyond_train":false,"loss":35.0,"accuracy":0.0,"count":4,"targets":50},)"
      R"({"min_len":16,"max_len":16,"beyond_train":false,"loss":0.01,"accuracy":1.0,"count":3,"targets":50},)"
      R"({"min_len":17,"max_len":32,"beyond_train":true,"loss":9.0,"accuracy":0.0,"count":8,"targets":200}]})"
      "\n";
  dir.write("metrics.jsonl", metrics);
  dir.write("summary.json", R"({"steps":4,"diverged":false,"wall_time_s":1.0,"threads":1})");
  study::RunSpec spec;
  spec.name = "run";
  spec.config = train::config_from_json(
      nlohmann::json::parse(fmt::format(
          R"({{"task":{{"name":"reverse","min_len":1,"max_len":16,"eval_max_len":32,"length_regime":"{}"}},)"
          R"("train":{{"steps":4,"batch_size":32}}}})",
          regime)),
      "fixture");
  return study::read_run(spec, dir.path.string());
}

}  // namespace

TEST_CASE("single-length regime: trained = the lengths the batches held, the shorter ones unseen") {
  TempDir dir("normlab_single");
  const study::RunResult single = read_fixture(dir, "single", 16, 16, 17);
  CHECK(single.single_length);
  CHECK(single.shortest_trained == 16);
  CHECK(single.longest_trained == 16);
  CHECK(single.final_trained().accuracy == doctest::Approx(1.0));
  CHECK(single.final_trained().targets == 50);
  // Unseen: the shorter lengths 1-15 and the longer 17-32, target-weighted.
  CHECK(single.final_unseen().targets == 350);
  CHECK(single.final_unseen().accuracy == doctest::Approx(0.0));
  CHECK(single.final_unseen().loss == doctest::Approx((35.0 * 150 + 9.0 * 200) / 350));
  CHECK(study::classify(single) == study::Outcome::solved);
  CHECK(single.typical_batch_sequences() == 17);

  // The same records of a mixed run keep the trainer's groups: lengths 1-16 trained, judged there.
  const study::RunResult mixed = read_fixture(dir, "mixed", 1, 16, 32);
  CHECK_FALSE(mixed.single_length);
  CHECK(mixed.final_trained().accuracy == doctest::Approx(0.05));
  CHECK(study::classify(mixed) == study::Outcome::exploded);
}

TEST_CASE("single-length regime: a bucket holding trained and untrained lengths counts in neither group") {
  const std::vector<study::BucketResult> buckets{{1, 12, false, 5.0, 0.0, 10, 100},
                                                 {13, 16, false, 1.0, 0.5, 4, 40},
                                                 {17, 32, true, 9.0, 0.0, 8, 200}};
  CHECK(std::isnan(study::held_out_of(buckets, false, 16, 16).accuracy));
  CHECK(study::held_out_of(buckets, true, 16, 16).targets == 300);
  CHECK(study::held_out_of(buckets, false, 1, 16).targets == 140);  // every trained bucket when all were trained
}

TEST_CASE("length buckets: cut before a length so that it starts a bucket of its own") {
  const std::vector<data::LengthBucket> buckets = data::cut_buckets_before(data::make_length_buckets(32, 4, 16), 16);
  REQUIRE(buckets.size() == 9);
  CHECK(buckets[3].min_len == 13);
  CHECK(buckets[3].max_len == 15);
  CHECK(buckets[4].min_len == 16);
  CHECK(buckets[4].max_len == 16);
  CHECK_FALSE(buckets[4].beyond_train_max);
  CHECK(buckets[5].beyond_train_max);
  // Already a bucket's start: unchanged.
  CHECK(data::cut_buckets_before(data::make_length_buckets(32, 4, 16), 13).size() == 8);
}

TEST_CASE("single-length regime: the Findings name the lengths such runs trained on apart") {
  TempDir dir("normlab_single_findings");
  study::RunResult fixture = read_fixture(dir, "single", 16, 16, 17);
  dir.write("config.json", train::to_json(fixture.spec.config).dump());
  const study::ComparePlan plan = study::plan_from_run_dirs({dir.path.string()}, {});
  std::vector<study::RunResult> results;
  for (const study::RunSpec& spec : plan.runs) results.push_back(study::read_run(spec, spec.dir));
  REQUIRE(results.size() == 1);
  CHECK(results[0].single_length);
  std::string all;
  for (const std::string& line : study::findings(plan, study::summarize(results))) all += line + "\n";
  INFO(all);
  CHECK(all.find("1 solved") != std::string::npos);
  CHECK(all.find("trained lengths 1–16 (single-length runs: 16 only)") != std::string::npos);
}

TEST_CASE(
    "single-length regime: a trained run's evaluation gives its length a bucket, its batches hold fewer sequences") {
  TempDir dir("normlab_single_trained");
  const std::string config_path = dir.write("single.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16, "norm": "batchnorm"},
    "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 48,
             "bucket_width": 4, "length_regime": "single"},
    "train": {"steps": 6, "batch_size": 8, "eval_every": 6, "log_every": 1, "threads": 1}})");
  const std::string run_dir = dir.sub("run");
  {
    train::Trainer trainer(train::load_config(config_path, {}));
    trainer.start(run_dir);
    trainer.fit();
  }
  study::RunSpec spec;
  spec.name = "run";
  spec.config = train::load_config(config_path, {});
  const study::RunResult result = study::read_run(spec, run_dir);
  CHECK(result.shortest_trained == 8);
  CHECK(result.longest_trained == 8);
  // Tokens matched to a mixed batch of 8 sequences of lengths 1-8 (36 tokens): 4 or 5 of length 8.
  CHECK(result.typical_batch_sequences() < 8);
  CHECK(result.final_trained().targets > 0);  // length 8 has its own bucket (5-7 | 8)

  // The in-distribution batches of the BatchNorm check: the trained length only.
  train::LoadedRun loaded = train::load_run(run_dir);
  train::EvalSettings settings;
  settings.trained_lengths_only = true;
  const train::RunEvaluation eval = train::evaluate_run(loaded, std::nullopt, settings);
  int64_t sequences = 0;
  for (const train::BucketMetrics& b : eval.metrics.buckets) {
    if (b.sequences == 0) continue;
    CHECK(b.bucket.min_len == 8);
    CHECK(b.bucket.max_len == 8);
    sequences += b.sequences;
  }
  CHECK(sequences > 0);
}
