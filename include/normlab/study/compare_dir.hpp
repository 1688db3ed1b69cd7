#pragma once
// A compare output directory read back as the plan compare drew it from: the names, settings and
// grid of `normlab compare`'s report, from the directory's own files (configs/NAME.json is every
// planned run, runs/NAME/config.json every started one). For `normlab serve`, which is given the
// directory, not the compare config.
#include <string>
#include <vector>

#include "normlab/study/report.hpp"

namespace normlab::study {

// Where compare records which config made DIR (DIR/compare-source.json: {"config": ABSOLUTE_PATH}),
// so that `serve DIR` can plan exactly as compare does. Written by compare; errors: InputError.
void record_compare_source(const std::string& dir, const std::string& config_path);

// The plan of compare output directory `dir`. When DIR/compare-source.json names a compare config
// that still loads and plans every started run, that plan (load_compare_plan: the search, the
// equivalence margins, every name). Otherwise read back from the directory: plan.runs holds every planned run (the Grid
// line counts them); the started ones (`started`, run directories with a config.json) are read as `plan_from_run_dirs`
// reads them, then named as compare names them: variant by its name
// ("post-ln", "none"), setting "4 layers, warmup, train.batch_size=4", title and Grid line of a
// compare report. A search's later rounds count as grid rates (the search itself is not known).
// InputError as plan_from_run_dirs for a started run's config.
ComparePlan plan_from_compare_dir(const std::string& dir, const std::vector<std::string>& started);

}  // namespace normlab::study
