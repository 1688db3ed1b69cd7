// curves.csv of the live page's last drawing, written a piece at a time as the client reads it:
// every point of every run, never whole in memory.
#include "normlab/serve/live.hpp"

#include <algorithm>

namespace normlab::serve {

std::string LiveReport::CurvesWriter::next(size_t bytes) {
  std::string out;
  if (header_) {
    header_ = false;
    out = study::curves_csv({});
  }
  if (!results_) return out;
  // study::curves_csv of a slice of one run at a time (the same rows, the header dropped): up to
  // 20,000 steps, then that run's evaluations.
  while (out.size() < bytes && run_ < results_->size()) {
    const study::RunResult& r = (*results_)[run_];
    std::vector<study::RunResult> slice(1);
    slice[0].spec = r.spec;
    if (!evals_) {
      const size_t end = std::min(r.steps.size(), step_ + 20000);
      auto part = [&](const std::vector<double>& v) {
        return std::vector<double>(v.begin() + std::ptrdiff_t(std::min(step_, v.size())),
                                   v.begin() + std::ptrdiff_t(std::min(end, v.size())));
      };
      slice[0].steps = part(r.steps), slice[0].loss = part(r.loss), slice[0].accuracy = part(r.accuracy);
      step_ = end;
      if (step_ >= r.steps.size()) evals_ = true;
    } else {
      slice[0].evals = r.evals;
      evals_ = false, step_ = 0, ++run_;
    }
    const std::string rows = study::curves_csv(slice);
    out.append(rows, std::min(rows.size(), rows.find('\n') + 1));
  }
  return out;
}

LiveReport::CurvesWriter LiveReport::curves_writer() {
  const std::lock_guard<std::mutex> guard(mutex_);
  return CurvesWriter(results_);
}

std::string LiveReport::curves_csv() {
  CurvesWriter writer = curves_writer();
  std::string csv;
  for (std::string piece; !(piece = writer.next(1 << 20)).empty();) csv += piece;
  return csv;
}

}  // namespace normlab::serve
