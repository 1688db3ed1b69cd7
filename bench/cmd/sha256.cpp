// normlab bench sha256 (--file FILE | --megabytes N) [--repeats R] [--json]
// What a run's data fingerprint costs (docs/run-directory.md, "Data fingerprints").
#include <fmt/core.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "normlab/bench/sha256.hpp"
#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/rng.hpp"

namespace normlab::cli {

namespace {

struct BenchSha256Options {
  std::string file;
  int megabytes = 0;  // > 0: hash a generated file of this size instead of --file
  int repeats = 9;
  bool json = false;
};

// N MB of pseudo-random bytes in a temporary file, removed when it goes out of scope.
struct GeneratedFile {
  std::string path;
  explicit GeneratedFile(int megabytes) {
    path = (std::filesystem::temp_directory_path() / fmt::format("normlab_bench_sha256_{}.bin", ::getpid())).string();
    std::string bytes(size_t(megabytes) * 1'000'000, '\0');
    Rng rng(1);
    for (char& byte : bytes) byte = char(rng.next_u32() >> 24);
    io::write_file_atomic(path, bytes);
  }
  ~GeneratedFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

void run(const BenchSha256Options& options) {
  if (options.file.empty() == (options.megabytes == 0))
    throw InputError("bench sha256: give one of --file FILE or --megabytes N");
  std::unique_ptr<GeneratedFile> generated;
  if (options.megabytes > 0) generated = std::make_unique<GeneratedFile>(options.megabytes);
  const bench::Sha256BenchResult r = bench::bench_sha256(generated ? generated->path : options.file, options.repeats);
  if (options.json) {
    fmt::print("{}\n", nlohmann::json{{"benchmark", "sha256"},
                                      {"file", generated ? "generated" : r.file},
                                      {"bytes", r.bytes},
                                      {"repeats", r.repeats},
                                      {"median_s", r.median_s},
                                      {"min_s", r.min_s},
                                      {"megabytes_per_s", r.megabytes_per_s},
                                      {"sha256", r.sha256}}
                           .dump());
    return;
  }
  fmt::print("sha256 of {} ({} bytes), {} timed reads, one thread\n", generated ? "a generated file" : r.file, r.bytes,
             r.repeats);
  fmt::print("  median {:.4f} s  {:.0f} MB/s\n  min    {:.4f} s\n  sha256 {}\n", r.median_s, r.megabytes_per_s, r.min_s,
             r.sha256);
}

}  // namespace

void add_bench_sha256(CLI::App& bench) {
  auto options = std::make_shared<BenchSha256Options>();
  CLI::App* cmd = bench.add_subcommand("sha256", "Time the SHA-256 a run computes of each data file it reads");
  cmd->add_option("--file", options->file, "File to hash (from the page cache: one untimed read first)");
  cmd->add_option("--megabytes", options->megabytes, "Hash a generated file of N MB (10^6 bytes) instead")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--repeats", options->repeats, "Timed hashes; the median is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object instead of a table");
  cmd->callback([options] { run(*options); });
}

}  // namespace normlab::cli
