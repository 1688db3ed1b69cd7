// study::read_run keeps a finished run's records for the rest of the process (a compare re-reads
// every finished run at each search round and for the report), and never serves them once a file
// of the run has changed.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "normlab/study/plan.hpp"
#include "normlab/study/results.hpp"
#include "support.hpp"

using namespace normlab;
using normlab::test::TempDir;

namespace {

// metrics.jsonl of two steps whose last loss is `loss` (one digit: every version has the same size).
std::string metrics_text(int loss_digit) {
  return nlohmann::json{{"step", 1}, {"loss", 0.5}, {"accuracy", 0.5}}.dump() + "\n" +
         nlohmann::json{{"step", 2}, {"loss", loss_digit / 10.0}, {"accuracy", 0.5}}.dump() + "\n";
}

}  // namespace

TEST_CASE("read_run: a finished run read twice gives the same records, and a changed file is read again") {
  TempDir dir("normlab_test_read_run_cache");
  dir.write("metrics.jsonl", metrics_text(3));
  dir.write("summary.json", R"({"steps": 2})");
  study::RunSpec spec;
  spec.variant = "pre-ln";
  spec.config.train.steps = 2;
  // Files changed within the last second are never kept (file times advance in steps of a few
  // milliseconds); these are older when read below, so the first read is kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const study::RunResult first = study::read_run(spec, dir.path.string());
  REQUIRE(first.finished);
  REQUIRE(first.loss.size() == 2);
  CHECK(first.loss[1] == 0.3);
  spec.variant = "post-ln";  // the spec is the caller's, whichever way the records were read
  const study::RunResult again = study::read_run(spec, dir.path.string());
  CHECK(again.spec.variant == "post-ln");
  CHECK(again.loss == first.loss);
  CHECK(again.final_train_loss == first.final_train_loss);
  // The same bytes but one: a new version of the file, read as such.
  dir.write("metrics.jsonl", metrics_text(7));
  const study::RunResult changed = study::read_run(spec, dir.path.string());
  REQUIRE(changed.loss.size() == 2);
  CHECK(changed.loss[1] == 0.7);
  // And a run whose summary is gone is not finished any more.
  std::filesystem::remove(dir.sub("summary.json"));
  CHECK_FALSE(study::read_run(spec, dir.path.string()).finished);
}
