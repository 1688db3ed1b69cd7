// The live report: when the page is drawn again (only when a run's files, lock or metrics reader
// changed, at most once per 5 drawing times, by one caller at a time) and what every other caller
// gets meanwhile. What one drawing reads and shows is live_parts.hpp's files. Everything here
// reads; nothing writes.
#include "normlab/serve/live.hpp"

#include <fmt/format.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>

#include "live_parts.hpp"
#include "normlab/error.hpp"
#include "normlab/study/run_dirs.hpp"

namespace normlab::serve {

namespace fs = std::filesystem;

LiveReport::LiveReport(std::string dir, uint64_t report_bytes) : dir_(std::move(dir)), report_bytes_(report_bytes) {
  std::error_code ec;
  if (!fs::exists(dir_, ec) && !ec) return;  // waits for it: the page says what to run
  if (std::string why = cannot_read(dir_); !why.empty()) throw InputError(why);
  if (!fs::is_directory(dir_, ec)) throw InputError(fmt::format("{}: not a directory", dir_));
  if (live_parts::kind_of(dir_) == live_parts::DirKind::folder && live_parts::scan(dir_).run_dirs.empty())
    throw InputError(
        fmt::format("{}: not a run directory (config.json, metrics.jsonl), a compare output directory "
                    "(runs/) or a folder of run directories",
                    dir_));
}

bool LiveReport::waiting() {
  std::error_code ec;
  return !fs::exists(dir_, ec);
}

LiveReport::~LiveReport() {
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  readers_changed_.notify_all();
  redraw_.notify_all();
  if (catch_up_.joinable()) catch_up_.join();
  if (drawer_.joinable()) drawer_.join();
}

LiveReport::Page LiveReport::latest() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cached_.html.empty()) {
      redraw_wanted_ = true;
      if (!drawer_.joinable() && !stopping_)
        drawer_ = std::thread([this] {
          std::unique_lock<std::mutex> wait(mutex_);
          for (;;) {
            redraw_.wait(wait, [&] { return redraw_wanted_ || stopping_; });
            if (stopping_) return;
            redraw_wanted_ = false;
            wait.unlock();
            page();  // draws only if the runs changed (and not sooner than 5 drawing times after the last)
            wait.lock();
          }
        });
      Page page = cached_;
      lock.unlock();
      redraw_.notify_all();
      return page;
    }
  }
  return page();
}

LiveReport::Page LiveReport::page() {
  // One drawer; everyone else takes the last drawing at once instead of waiting for this one.
  std::unique_lock<std::mutex> drawing(draw_mutex_, std::try_to_lock);
  if (!drawing.owns_lock()) {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (!cached_.html.empty()) return cached_;
    return live_parts::reading_page(dir_, study::is_compare_dir(dir_));
  }
  // DIR may stop being readable while served: the page then says so (and draws again when it can).
  const bool absent = waiting();
  std::string dir_problem = absent ? live_parts::waiting_text(dir_) : cannot_read(dir_);
  live_parts::Layout layout;
  try {
    if (dir_problem.empty()) layout = live_parts::scan(dir_);
  } catch (const fs::filesystem_error& e) {
    dir_problem = fmt::format("{}: cannot read: {}", dir_, e.code().message());
  }
  const live_parts::FlockSet held = live_parts::held_flocks();
  std::string fingerprint =
      dir_problem + "\n" + live_parts::runs_fingerprint(layout.run_dirs, held) + readers_fingerprint();
  for (const std::string& name : layout.planned) fingerprint += name + "\n";
  // Drawing again costs reading every run; while runs write, draw at most once per 5 drawing times,
  // so that a large study's page takes at most a fifth of a core from the trainers.
  const auto now = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    if (!cached_.html.empty() && (fingerprint == fingerprint_ || now - drawn_at_ < 5 * drawing_time_)) return cached_;
  }

  // The report reads runs whole up to report_bytes_ of metrics in all (live_draw.cpp).
  live_parts::Admitter admit(report_bytes_, line_checks_, mutex_);
  live_parts::Drawn drawn = live_parts::draw(
      dir_, layout, held, first_seen_, [&](const std::string& run_dir) { return admit(run_dir); },
      [this](const std::string& run_dir, bool running) { return row_from_reader(run_dir, running); });
  if (!dir_problem.empty()) drawn.problem = dir_problem;
  const std::string etag = fmt::format("\"{:016x}\"", std::hash<std::string>{}(fingerprint));
  Page page =
      live_parts::page_of(drawn, etag, dir_, layout, absent ? dir_problem : "No report yet: " + drawn.problem + ".");
  drawn.report.reset();
  ::malloc_trim(0);  // a long run's curves were read and drawn: give their pages back to the system
  admit.forget_unasked();
  const std::lock_guard<std::mutex> guard(mutex_);
  run_dirs_.clear();
  for (const std::string& d : layout.run_dirs) run_dirs_[fs::path(d).filename().string()] = d;
  results_ = drawn.results;
  fingerprint_ = fingerprint;
  drawn_at_ = std::chrono::steady_clock::now();
  drawing_time_ = drawn_at_ - now;
  cached_ = page;
  return page;
}

}  // namespace normlab::serve
