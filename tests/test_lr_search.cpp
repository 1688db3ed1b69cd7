// The learning-rate search: the logistic fit finds a known boundary on synthetic 0/1 outcomes and
// its profile-likelihood interval covers it at about the stated rate; separated outcomes (all
// learned below a rate, none above) still give a finite boundary; a variant that never fails or
// never learns says so; the rounds are a function of the outcomes alone; the config is checked; a
// compare config built on another overrides its grid; and a tiny real search end to end.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/rng.hpp"
#include "normlab/study/plan.hpp"
#include "normlab/study/render.hpp"
#include "normlab/study/report.hpp"
#include "normlab/study/reuse.hpp"
#include "normlab/study/run_dirs.hpp"
#include "normlab/study/search.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace normlab;
using normlab::test::read_text;
using normlab::test::TempDir;

namespace {

// Outcomes drawn from P(learned) = 1 / (1 + (lr / lr50)^slope) at each rate, `seeds` per rate.
std::vector<study::RateOutcome> simulate(const std::vector<double>& rates, double lr50, double slope, int seeds,
                                         Rng& rng) {
  std::vector<study::RateOutcome> out;
  for (double lr : rates) {
    study::RateOutcome r{lr, 0, seeds};
    const double p = 1 / (1 + std::pow(lr / lr50, slope));
    for (int s = 0; s < seeds; ++s) r.learned += rng.uniform() < p ? 1 : 0;
    out.push_back(r);
  }
  return out;
}

const std::vector<double> kRates{0.001, 0.00316, 0.01, 0.0316, 0.1, 0.316};

}  // namespace

TEST_CASE("lr search: the fit finds a known boundary and its interval is narrow with many seeds") {
  Rng rng(7);
  const auto tested = simulate(kRates, 0.02, 3.0, 200, rng);
  const study::BoundaryFit fit = study::fit_boundary(tested, 0.001, 0.316);
  REQUIRE(fit.kind == study::BoundaryFit::Kind::boundary);
  CHECK(fit.low < 0.02);
  CHECK(fit.high > 0.02);
  CHECK(fit.lr50 == doctest::Approx(0.02).epsilon(0.15));
  CHECK(fit.high / fit.low < 1.6);
  CHECK_FALSE(fit.low_open);
  CHECK_FALSE(fit.high_open);
  CHECK(fit.slope == doctest::Approx(3.0).epsilon(0.35));
  CHECK(fit.p_learned(fit.lr50) == doctest::Approx(0.5).epsilon(0.01));
  // The interval's ends are where the profile has fallen chi2(1, 0.95) / 2 = 1.92 below its maximum.
  const double top = *std::max_element(fit.profile.begin(), fit.profile.end());
  for (double end : {fit.low, fit.high}) {
    const double theta = std::log(end);
    size_t i = 0;  // theta_grid[i] <= theta < theta_grid[i + 1]
    while (i + 2 < fit.theta_grid.size() && fit.theta_grid[i + 1] <= theta) ++i;
    const double t = (theta - fit.theta_grid[i]) / (fit.theta_grid[i + 1] - fit.theta_grid[i]);
    const double at_end = fit.profile[i] + t * (fit.profile[i + 1] - fit.profile[i]);
    CHECK(top - at_end == doctest::Approx(1.92).epsilon(0.01));
  }
}

TEST_CASE("lr search: the 95% profile interval covers the true boundary in most of 60 small experiments") {
  Rng rng(11);
  int covered = 0, finite = 0;
  const int experiments = 60;
  for (int e = 0; e < experiments; ++e) {
    const auto tested = simulate(kRates, 0.02, 2.0, 5, rng);
    const study::BoundaryFit fit = study::fit_boundary(tested, 0.001, 0.316);
    if (fit.kind != study::BoundaryFit::Kind::boundary) continue;
    ++finite;
    if (fit.low <= 0.02 && 0.02 <= fit.high) ++covered;
  }
  CHECK(finite >= experiments * 9 / 10);
  // Nominal 95%; with 5 seeds per rate the likelihood-ratio interval is approximate: accept >= 85%.
  CHECK(double(covered) / finite >= 0.85);
}

TEST_CASE("lr search: separated outcomes give a finite boundary between the last learned and first failed rate") {
  // All 5 seeds learned up to 0.01, none from 0.0316: the plain maximum likelihood has no finite slope.
  std::vector<study::RateOutcome> tested{{0.001, 5, 5}, {0.00316, 5, 5}, {0.01, 5, 5}, {0.0316, 0, 5}, {0.1, 0, 5}};
  const study::BoundaryFit fit = study::fit_boundary(tested, 0.001, 0.1);
  REQUIRE(fit.kind == study::BoundaryFit::Kind::boundary);
  CHECK(std::isfinite(fit.slope));
  CHECK(fit.slope < 100);  // Firth's penalty keeps it moderate; plain likelihood runs to the search bound
  CHECK(fit.lr50 > 0.01);
  CHECK(fit.lr50 < 0.0316);
  CHECK(fit.low < fit.lr50);
  CHECK(fit.high > fit.lr50);
  CHECK(fit.fitted_rates == 5);  // the peak is the lowest rate where every seed learned
  CHECK(fit.fitted_runs == 25);
}

TEST_CASE("lr search: slow at low rates - the fit starts at the peak, below it is ignored") {
  std::vector<study::RateOutcome> tested{{0.001, 0, 5}, {0.00316, 1, 5}, {0.01, 5, 5}, {0.0316, 2, 5}, {0.1, 0, 5}};
  const study::BoundaryFit fit = study::fit_boundary(tested, 0.001, 0.1);
  REQUIRE(fit.kind == study::BoundaryFit::Kind::boundary);
  CHECK(fit.peak_lr == 0.01);
  CHECK(fit.fitted_rates == 3);
  CHECK(fit.lr50 > 0.01);
  CHECK(fit.lr50 < 0.1);
}

TEST_CASE("lr search: a variant that never fails or never learns gets no boundary") {
  std::vector<study::RateOutcome> always{{0.001, 5, 5}, {0.01, 5, 5}, {0.1, 4, 5}, {0.3, 3, 5}};
  const study::BoundaryFit up = study::fit_boundary(always, 0.001, 0.3);
  CHECK(up.kind == study::BoundaryFit::Kind::never_failed);
  CHECK(up.top_lr == 0.3);
  CHECK_FALSE(std::isfinite(up.lr50));
  std::vector<study::RateOutcome> never{{0.001, 2, 5}, {0.01, 1, 5}, {0.1, 0, 5}};
  CHECK(study::fit_boundary(never, 0.001, 0.1).kind == study::BoundaryFit::Kind::never_learned);
  CHECK(study::refine_rates(never, 5).empty());
  CHECK(study::fit_boundary({}, 0.001, 0.1).kind == study::BoundaryFit::Kind::not_run);
}

TEST_CASE("lr search: the ratio of two boundaries and its interval") {
  Rng rng(5);
  const auto reference = simulate(kRates, 0.005, 3.0, 100, rng);
  const auto variant = simulate(kRates, 0.02, 3.0, 100, rng);
  const study::BoundaryFit r = study::fit_boundary(reference, 0.001, 0.316);
  const study::BoundaryFit v = study::fit_boundary(variant, 0.001, 0.316);
  const study::BoundaryRatio ratio = study::boundary_ratio(v, r);
  CHECK(ratio.ratio == doctest::Approx(4.0).epsilon(0.25));
  CHECK(ratio.low < 4.0);
  CHECK(ratio.high > 4.0);
  CHECK(ratio.low > 2.0);
  CHECK(ratio.high < 8.0);
  CHECK(ratio.ratio == doctest::Approx(v.lr50 / r.lr50).epsilon(0.02));
  // The ratio's interval is wider than either boundary's alone (both are uncertain).
  CHECK(std::log(ratio.high / ratio.low) > std::log(v.high / v.low));
}

TEST_CASE("lr search: the ratio's interval is open at the end where the reference's is open at the other") {
  // ratio = variant / reference: a reference boundary with no upper limit leaves the ratio no lower
  // limit, and one with no lower limit leaves it no upper limit; the variant's ends carry over as they are.
  Rng rng(5);
  const study::BoundaryFit r = study::fit_boundary(simulate(kRates, 0.005, 3.0, 100, rng), 0.001, 0.316);
  const study::BoundaryFit v = study::fit_boundary(simulate(kRates, 0.02, 3.0, 100, rng), 0.001, 0.316);
  REQUIRE(r.kind == study::BoundaryFit::Kind::boundary);
  REQUIRE(v.kind == study::BoundaryFit::Kind::boundary);
  REQUIRE_FALSE(r.low_open);
  REQUIRE_FALSE(r.high_open);
  REQUIRE_FALSE(v.low_open);
  REQUIRE_FALSE(v.high_open);
  study::BoundaryFit open_above = r, open_below = r, variant_open_below = v;
  open_above.high_open = true;
  open_below.low_open = true;
  variant_open_below.low_open = true;
  study::BoundaryRatio ratio = study::boundary_ratio(v, open_above);
  CHECK(ratio.low_open);
  CHECK_FALSE(ratio.high_open);
  ratio = study::boundary_ratio(v, open_below);
  CHECK_FALSE(ratio.low_open);
  CHECK(ratio.high_open);
  ratio = study::boundary_ratio(variant_open_below, r);
  CHECK(ratio.low_open);
  CHECK_FALSE(ratio.high_open);
}

TEST_CASE("lr search: rounds are a function of the outcomes - midpoints where the fraction changes above the peak") {
  study::LrSearchSpec spec;
  spec.from = 0.001;
  spec.to = 1;
  spec.points = 5;
  CHECK(study::initial_rates(spec) == std::vector<double>{0.001, 0.00562, 0.0316, 0.178, 1});
  const std::vector<study::RateOutcome> tested{{0.001, 1, 5},
                                               {0.00562, 5, 5},
                                               {0.0316, 2, 5},
                                               {0.178, 0, 5},
                                               {1, 0, 5}};
  // Below the peak (0.001 -> 0.00562 changes too) is not refined: that is the slow side.
  CHECK(study::refine_rates(tested, 5) == std::vector<double>{0.0133, 0.075});
  CHECK(study::refine_rates(tested, 1) == std::vector<double>{0.0133});  // the larger change first
  CHECK(study::refine_rates(tested, 5) == study::refine_rates(tested, 5));
  // Settled: neighbours above the peak agree.
  const std::vector<study::RateOutcome> flat{{0.001, 5, 5}, {0.01, 5, 5}, {0.1, 0, 5}, {0.3, 0, 5}};
  CHECK(study::refine_rates(flat, 5) == std::vector<double>{0.0316});
  const std::vector<study::RateOutcome> settled{{0.001, 5, 5}, {0.0316, 5, 5}, {0.0317, 0, 5}};
  CHECK(study::refine_rates(settled, 5).empty());  // no 3-digit rate between them
  CHECK(study::round_rate(0.0173205) == 0.0173);
}

TEST_CASE("lr search: the config's search section is checked, each error naming the file and key") {
  TempDir tmp;
  tmp.write("base.json",
            R"({"task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12}, "model": {"d_model": 16,
    "heads": 2, "layers": 1, "ffn": 32, "max_len": 16}, "train": {"steps": 4, "batch_size": 4}})");
  const auto error_of = [&](const std::string& search) {
    const std::string path = tmp.write("c.json", R"({"base": "base.json", "search": )" + search + "}");
    try {
      (void)study::load_compare_plan(path);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string c = tmp.sub("c.json");
  CHECK(error_of(R"({"lr": {"from": 0.001}})") == c + ": search.lr.to: missing (a learning rate in (0, 10])");
  CHECK(error_of(R"({"lr": {"from": 0.1, "to": 0.01}})").find(c + ": search.lr.to: must be above from") == 0);
  CHECK(error_of(R"({"lr": {"from": 0, "to": 0.01}})").find(c + ": search.lr.from: must be a number in (0, 10]") == 0);
  CHECK(error_of(R"({"lr": {"from": 0.001, "to": 0.1, "points": 1}})")
            .find(c + ": search.lr.points: must be an integer in [2, 16]") == 0);
  CHECK(error_of(R"({"lr": {"from": 0.001, "to": 0.1, "rounds": 1.5}})").find(c + ": search.lr.rounds:") == 0);
  CHECK(error_of(R"({"lr": {"from": 0.001, "to": 0.1, "step": 2}})").find(c + ": search.lr.step: unknown key") == 0);
  CHECK(error_of(R"({"depth": {}})").find(c + ": search.depth: unknown key") == 0);
  CHECK(error_of(R"([1])").find(c + ": search: must be an object") == 0);
  const std::string both = tmp.write("both.json", R"({"base": "base.json", "grid": {"lr": [0.01]},
    "search": {"lr": {"from": 0.001, "to": 0.1}}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(both),
                       (both + ": grid.lr: search.lr sets the learning rates: use one of the two").c_str(), InputError);
  // Without finished runs only round 0 is known, in grid order.
  const std::string ok = tmp.write("ok.json", R"({"base": "base.json", "grid": {"variants": ["none", "pre-ln"],
    "seeds": [1, 2]}, "search": {"lr": {"from": 0.001, "to": 0.1, "points": 3, "rounds": 2}}})");
  const study::ComparePlan plan = study::load_compare_plan(ok);
  CHECK(plan.runs.size() == 3 * 2 * 2);
  CHECK(plan.search.first_round_runs == plan.runs.size());
  CHECK(plan.lrs == std::vector<double>{0.001, 0.01, 0.1});
  REQUIRE(plan.search.blocks.size() == 2);
  CHECK_FALSE(plan.search.blocks[0].settled);
  CHECK(plan.search.blocks[0].waiting_on == "none_lr0.001_L1_warmup_s1");
  CHECK(study::config_kind(ok) == study::ConfigKind::compare);
}

TEST_CASE("compare config on a compare config: grid keys replace the base's, set merges key by key") {
  TempDir tmp;
  fs::create_directories(tmp.path / "sub");
  tmp.write("sub/base.json",
            R"({"task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12}, "model": {"d_model": 16,
    "heads": 2, "layers": 1, "ffn": 32, "max_len": 16}, "train": {"steps": 4, "batch_size": 4}})");
  tmp.write("sub/study.json", R"({"base": "base.json", "set": {"train.steps": 6, "train.batch_size": 8},
    "grid": {"variants": ["none", "pre-ln"], "lr": [0.01, 0.03], "seeds": [0, 1]}})");
  const study::ComparePlan rerun = study::load_compare_plan(
      tmp.write("rerun.json",
                R"({"base": "sub/study.json", "set": {"train.steps": 5}, "grid": {"seeds": [20, 21, 22]}})"));
  CHECK(rerun.variants == std::vector<std::string>{"none", "pre-ln"});
  CHECK(rerun.lrs == std::vector<double>{0.01, 0.03});
  CHECK(rerun.seeds == std::vector<uint64_t>{20, 21, 22});
  CHECK(rerun.runs.size() == 2 * 2 * 3);
  CHECK(rerun.base.train.steps == 5);       // this file's set wins
  CHECK(rerun.base.train.batch_size == 8);  // the base study's set is kept
  // A search over the base study's grid drops its grid.lr; a chain of two works too.
  const std::string searched =
      tmp.write("searched.json",
                R"({"base": "rerun.json", "search": {"lr": {"from": 0.001, "to": 0.1, "points": 3}}})");
  const study::ComparePlan search = study::load_compare_plan(searched);
  CHECK(search.search.enabled());
  CHECK(search.lrs == std::vector<double>{0.001, 0.01, 0.1});
  CHECK(search.seeds == std::vector<uint64_t>{20, 21, 22});
  // A cycle is refused, naming the file.
  const std::string a = tmp.write("a.json", R"({"base": "b.json", "grid": {"seeds": [1]}})");
  tmp.write("b.json", R"({"base": "a.json", "grid": {"seeds": [2]}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(a), doctest::Contains("more than 8 deep"), InputError);
  // The demo rerun on seeds 20-24: the demo's runs but for train.seed (and the names).
  const std::string demo_path = std::string(NORMLAB_SOURCE_DIR) + "/configs/demo.json";
  const study::ComparePlan demo = study::load_compare_plan(demo_path);
  const study::ComparePlan replication = study::load_compare_plan(
      tmp.write("replication.json", R"({"base": ")" + demo_path + R"(", "grid": {"seeds": [20, 21, 22, 23, 24]}})"));
  REQUIRE(replication.runs.size() == demo.runs.size());
  for (size_t i = 0; i < demo.runs.size(); ++i) {
    train::RunConfig a = demo.runs[i].config, b = replication.runs[i].config;
    CHECK(b.train.seed == a.train.seed + 20);
    a.train.seed = b.train.seed;
    CHECK(a == b);
  }
  // A mistake in the overriding file is reported against it.
  const std::string bad = tmp.write("bad.json", R"({"base": "sub/study.json", "grid": {"seeds": [-1]}})");
  CHECK_THROWS_WITH_AS(study::load_compare_plan(bad), doctest::Contains((bad + ": grid.seeds").c_str()), InputError);
}

TEST_CASE("compare search end to end: rounds run, reused on rerun, the report and Answer give boundaries") {
  TempDir tmp;
  tmp.write("base.json", R"({
    "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
    "task": {"name": "reverse", "min_len": 1, "max_len": 3, "eval_max_len": 4, "eval_examples": 16, "bucket_width": 2},
    "optim": {"lr": 0.01, "warmup_steps": 0},
    "train": {"steps": 60, "batch_size": 16, "eval_every": 60, "log_every": 60, "diagnostics_every": 60,
              "checkpoint_every": 60, "threads": 1}})");
  const std::string config = tmp.write("search.json", R"({"base": "base.json",
    "grid": {"variants": ["none", "pre-ln"], "seeds": [0, 1]},
    "search": {"lr": {"from": 0.003, "to": 3, "points": 3, "rounds": 1}}})");
  const std::string out = tmp.sub("out");
  const std::string command = std::string("\"") + NORMLAB_BINARY + "\" compare --config \"" + config + "\" --out \"" +
                              out + "\" --jobs 2 >\"" + tmp.sub("stdout") + "\" 2>\"" + tmp.sub("stderr") + "\"";
  const int status = std::system(command.c_str());
  INFO(read_text(tmp.sub("stderr")));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const study::ComparePlan plan = study::load_compare_plan(config, out);
  // Most seeds learn at 0.0949 and none at 3 here, so round 1 adds rates between them.
  CHECK(plan.runs.size() > 3 * 2 * 2);
  CHECK(plan.search.first_round_runs == 3 * 2 * 2);
  for (const study::LrSearchSpec::Block& b : plan.search.blocks) CHECK(b.settled);
  for (const study::RunSpec& r : plan.runs) CHECK(fs::exists(fs::path(out) / "runs" / r.name / "summary.json"));
  const nlohmann::json summary = nlohmann::json::parse(read_text(out + "/summary.json"));
  std::string answer;
  for (const auto& s : summary["answer"]) answer += s.get<std::string>() + "\n";
  CHECK(answer.find("Learning-rate boundary, none:") != std::string::npos);
  CHECK(answer.find("Learning-rate boundary, pre-ln:") != std::string::npos);
  CHECK(answer.find("half the seeds reach the learned level at lr") != std::string::npos);
  // summary.json carries the same boundaries as numbers.
  REQUIRE(summary["lr_boundaries"].size() == 2);
  for (const auto& b : summary["lr_boundaries"]) {
    if (b["kind"] != "boundary") continue;
    CHECK(b["low"].get<double>() <= b["lr50"].get<double>());
    CHECK(b["lr50"].get<double>() <= b["high"].get<double>());
    CHECK(answer.find(study::format_rate(b["lr50"].get<double>())) != std::string::npos);
  }
  CHECK(read_text(out + "/report.md").find("Learning-rate boundary: where each variant stops learning") !=
        std::string::npos);
  CHECK(fs::exists(out + "/charts/search.svg"));
  CHECK(read_text(tmp.sub("stdout")).find("Learning-rate boundary") != std::string::npos);
  // Rerun: everything is reused, nothing trained.
  REQUIRE(std::system(command.c_str()) == 0);
  CHECK(read_text(tmp.sub("stderr")).find("0/0 runs done") != std::string::npos);

  // Two shards run one after the other: each stops where the next round waits for the other's
  // runs, saying so; run again in turn they finish the same rounds as the unsharded search.
  const std::string sharded = tmp.sub("sharded");
  const auto shard = [&](const std::string& which, const std::string& extra) {
    const std::string cmd = std::string("\"") + NORMLAB_BINARY + "\" compare --config \"" + config + "\" --out \"" +
                            sharded + "\" --jobs 2 " + (which.empty() ? "" : "--shard " + which) + extra + " >\"" +
                            tmp.sub("stdout") + "\" 2>\"" + tmp.sub("stderr") + "\"";
    const int code = std::system(cmd.c_str());
    return WIFEXITED(code) ? WEXITSTATUS(code) : -1;
  };
  CHECK(shard("0/2", "") == 0);
  CHECK(read_text(tmp.sub("stderr")).find("waits for runs of other shards that no compare is training now") !=
        std::string::npos);
  for (int turn = 0; turn < 2; ++turn) {
    CHECK(shard("1/2", "") == 0);
    CHECK(shard("0/2", "") == 0);
  }
  REQUIRE(shard("", " --report-only") == 0);
  const study::ComparePlan sharded_plan = study::load_compare_plan(config, sharded);
  std::vector<std::string> names, sharded_names;
  for (const study::RunSpec& r : plan.runs) names.push_back(r.name);
  for (const study::RunSpec& r : sharded_plan.runs) sharded_names.push_back(r.name);
  CHECK(names == sharded_names);
  // Bit-identical runs give the same Answer.
  CHECK(nlohmann::json::parse(read_text(sharded + "/summary.json"))["answer"] == summary["answer"]);

  // Two shards at once on one --out: each waits while the other trains what the next round needs,
  // and together they finish every round in one go.
  const std::string together = tmp.sub("together");
  const std::string both = std::string("sh -c '") + NORMLAB_BINARY + " compare --config " + config + " --out " +
                           together + " --jobs 1 --shard 0/2 2>" + tmp.sub("err0") + " & " + NORMLAB_BINARY +
                           " compare --config " + config + " --out " + together + " --jobs 1 --shard 1/2 2>" +
                           tmp.sub("err1") + "; wait'";
  REQUIRE(std::system(both.c_str()) == 0);
  CHECK(read_text(tmp.sub("err0")).find("no compare is training") == std::string::npos);
  CHECK(read_text(tmp.sub("err1")).find("no compare is training") == std::string::npos);
  const study::ComparePlan together_plan = study::load_compare_plan(config, together);
  for (const study::LrSearchSpec::Block& b : together_plan.search.blocks) CHECK(b.settled);
  CHECK(together_plan.runs.size() == plan.runs.size());
}

TEST_CASE("lr search: configs/search-demo.json is a search whose round 0 is 5 rates x 3 variants x 5 seeds") {
  const std::string config = std::string(NORMLAB_SOURCE_DIR) + "/configs/search-demo.json";
  CHECK(study::config_kind(config) == study::ConfigKind::compare);
  const study::ComparePlan plan = study::load_compare_plan(config);
  CHECK(plan.search.enabled());
  CHECK(plan.runs.size() == 75);
  CHECK(plan.lrs == std::vector<double>{0.001, 0.00416, 0.0173, 0.0721, 0.3});
}
