#pragma once
// What each fuzz target does with one input, shared by the libFuzzer entry points (fuzz/fuzz_*.cpp,
// built by scripts/check/fuzz.sh) and the regression test (tests/test_fuzz_regressions.cpp), so a saved
// crash input is replayed through exactly the code that found it.
//
// The contract under test: every parser either accepts its input or throws normlab::InputError,
// the one exception the CLI reports as bad input (exit 2). A run_* function returns which of the two
// happened. Anything else escapes and is a finding: UsageError (the CLI calls that an internal
// error, exit 1, so user input must never cause it), a foreign exception type
// (nlohmann::json::exception, std::bad_alloc, ...) or a PropertyViolation when an accepted input
// breaks a round trip (parse -> write -> parse must give the same value back). Crashes, sanitizer reports and hangs are
// caught by the tools around it.
//
// Input layouts (what a file under fuzz/corpus/<target>/ holds):
//   npy          the bytes of a .npy file
//   safetensors  the bytes of a .safetensors file
//   jsonl        first byte: the task, (byte - '0') mod 5 = 0 reverse, 1 sort, 2 brackets,
//                3 majority, 4 mlm_text (vocabulary from kTextTaskLines); the rest: a JSONL file
//   config       the text of a config file (the file sits alone in a scratch directory)
//   config_set   "--set" assignments, one per line, applied to the config file "{}"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/data/jsonl.hpp"
#include "normlab/data/task.hpp"
#include "normlab/error.hpp"
#include "normlab/io/npy.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/train/config.hpp"

namespace normlab::fuzz {

enum class Outcome { accepted, rejected };

// An accepted input whose round trip changed it: a bug, never an expected outcome.
class PropertyViolation : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void require(bool condition, const std::string& what) {
  if (!condition) throw PropertyViolation(what);
}

// A private directory for the files the file-based parsers read; removed by the destructor.
class Scratch {
 public:
  Scratch() {
    std::string pattern = (std::filesystem::temp_directory_path() / "normlab-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("fuzz: cannot create a scratch directory");
    dir_ = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::string path(const std::string& name) const { return (std::filesystem::path(dir_) / name).string(); }

  // Writes `bytes` to `name` in the scratch directory (plain write: the parsers only read it).
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::string file_path = path(name);
    std::FILE* file = std::fopen(file_path.c_str(), "wb");
    if (file == nullptr) throw std::runtime_error("fuzz: cannot open " + file_path);
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
    if (std::fclose(file) != 0 || !ok) throw std::runtime_error("fuzz: cannot write " + file_path);
    return file_path;
  }

 private:
  std::string dir_;
};

// Runs `parse`; InputError means "rejected", anything else (UsageError included) propagates. An InputError
// must say where the problem is: its message starts with one of `prefixes` (the file path, or
// "--set <assignment>"), or the input is reported as a PropertyViolation.
template <class F>
Outcome expect_clean(const std::vector<std::string>& prefixes, F&& parse) {
  try {
    parse();
    return Outcome::accepted;
  } catch (const InputError& e) {
    const std::string_view message = e.what();
    bool located = false;
    for (const std::string& prefix : prefixes) located = located || message.substr(0, prefix.size()) == prefix;
    require(located, "InputError does not start with the file or flag it is about: " + std::string(message));
    return Outcome::rejected;
  }
}

// ------------------------------------------------------------------------------------------ npy

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Both readers; an array read_npy accepts must survive write_npy -> read_npy bit for bit.
inline Outcome run_npy(std::string_view bytes, const Scratch& scratch) {
  const std::string path = scratch.write("input.npy", bytes);
  io::NpyArray array;
  const Outcome as_float = expect_clean({path}, [&] { array = io::read_npy(path); });
  const Outcome as_int = expect_clean({path}, [&] {
    std::vector<int64_t> shape;
    std::vector<int64_t> values = io::read_npy_int(path, &shape);
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    require(int64_t(values.size()) == count, "read_npy_int: value count differs from product(shape)");
  });
  if (as_float == Outcome::accepted) {
    int64_t count = 1;
    for (int64_t dim : array.shape) count *= dim;
    require(int64_t(array.data.size()) == count, "read_npy: value count differs from product(shape)");
    const std::string copy_path = scratch.path("copy.npy");
    io::write_npy(copy_path, array.shape, array.data.data());
    io::NpyArray copy = io::read_npy(copy_path);
    require(copy.shape == array.shape, "npy round trip changed the shape");
    require(same_bits(copy.data, array.data), "npy round trip changed the data");
  }
  return as_float == Outcome::accepted || as_int == Outcome::accepted ? Outcome::accepted : Outcome::rejected;
}

// ---------------------------------------------------------------------------------- safetensors

// A file read_safetensors accepts must survive serialize -> read with the same metadata and tensors.
inline Outcome run_safetensors(std::string_view bytes, const Scratch& scratch) {
  const std::string path = scratch.write("input.safetensors", bytes);
  io::SafetensorsFile file;
  const Outcome outcome = expect_clean({path}, [&] { file = io::read_safetensors(path); });
  if (outcome == Outcome::rejected) return outcome;

  for (const io::TensorRecord& record : file.tensors) {
    uint64_t count = 1;
    for (int64_t dim : record.shape) count *= uint64_t(dim);
    require(record.bytes.size() == count * io::safetensors_dtype_size(record.dtype),
            "read_safetensors: byte count differs from shape * dtype size for '" + record.name + "'");
    require(file.find(record.name) == &record, "find() does not return the tensor itself for '" + record.name + "'");
    if (record.dtype == "F32") require(file.floats(record.name, record.shape).size() == count, "floats(): wrong size");
    if (record.dtype == "I64") require(file.int64s(record.name, record.shape).size() == count, "int64s(): wrong size");
  }
  // The writer refuses only inconsistent records (UsageError); everything the reader returns is
  // consistent, so here any exception is a bug.
  const std::string copy_path =
      scratch.write("copy.safetensors", io::serialize_safetensors(file.metadata, file.tensors));
  io::SafetensorsFile copy = io::read_safetensors(copy_path);
  require(copy.metadata == file.metadata, "safetensors round trip changed the metadata");
  require(copy.tensors.size() == file.tensors.size(), "safetensors round trip changed the tensor count");
  for (const io::TensorRecord& record : file.tensors) {
    const io::TensorRecord* other = copy.find(record.name);
    require(other != nullptr, "safetensors round trip lost tensor '" + record.name + "'");
    require(other->dtype == record.dtype && other->shape == record.shape && other->bytes == record.bytes,
            "safetensors round trip changed tensor '" + record.name + "'");
  }
  return outcome;
}

// ---------------------------------------------------------------------------------------- jsonl

// The masked-LM task's training text: its characters are the vocabulary (plus [MASK], [UNK]).
inline const std::vector<std::string>& text_task_lines() {
  static const std::vector<std::string> lines = {"In the beginning God created the heaven and the earth.",
                                                 "And God said, Let there be light: and there was light. [1:3]"};
  return lines;
}

inline const data::Task& jsonl_task(unsigned char selector) {
  static const std::vector<data::Task> tasks = [] {
    std::vector<data::Task> all;
    for (const std::string& name : data::algorithmic_task_names()) all.push_back(data::make_task(name));
    all.push_back(data::make_text_task(text_task_lines()));
    return all;
  }();
  return tasks[size_t(selector - '0') % tasks.size()];  // unsigned arithmetic: wraps, then mod 5
}

// load_jsonl on the file, parse_jsonl_line on the whole text as one "line", load_text_lines; every
// example loaded must survive example_to_jsonl -> parse_jsonl_line unchanged.
inline Outcome run_jsonl(std::string_view bytes, const Scratch& scratch) {
  if (bytes.empty()) return Outcome::rejected;
  const data::Task& task = jsonl_task(static_cast<unsigned char>(bytes[0]));
  const std::string_view text = bytes.substr(1);
  const std::string path = scratch.write("input.jsonl", text);

  std::vector<data::Example> examples;
  const Outcome outcome = expect_clean({path}, [&] { examples = data::load_jsonl(path, task); });
  expect_clean({"fuzz:1"}, [&] { data::parse_jsonl_line(text, task, "fuzz:1"); });
  expect_clean({path}, [&] { data::load_text_lines(path, 512); });

  for (const data::Example& example : examples) {
    require(!example.tokens.empty(), "load_jsonl returned an empty sequence");
    const std::string line = data::example_to_jsonl(example, task);
    const data::Example again = data::parse_jsonl_line(line, task, "roundtrip:1");
    require(again.tokens == example.tokens && again.targets == example.targets,
            "jsonl round trip changed the example: " + line);
  }
  return outcome;
}

// --------------------------------------------------------------------------------------- config

// A config load_config accepts must survive to_json -> config_from_json unchanged.
inline void check_config_round_trip(const train::RunConfig& config) {
  const nlohmann::json resolved = train::to_json(config);
  const std::string text = resolved.dump();  // throws on invalid UTF-8 in a string value
  const train::RunConfig again = train::config_from_json(nlohmann::json::parse(text), "roundtrip", ".",
                                                         /*require_files=*/false);
  require(again == config, "config round trip changed the config: " + text);
}

inline Outcome run_config(std::string_view bytes, const Scratch& scratch) {
  const std::string path = scratch.write("config.json", bytes);
  train::RunConfig config;
  const Outcome outcome = expect_clean({path}, [&] { config = train::load_config(path); });
  if (outcome == Outcome::accepted) check_config_round_trip(config);
  return outcome;
}

inline Outcome run_config_set(std::string_view bytes, const Scratch& scratch) {
  const std::string path = scratch.write("config.json", "{}");
  std::vector<std::string> overrides;
  size_t start = 0;
  while (start <= bytes.size()) {
    size_t end = bytes.find('\n', start);
    if (end == std::string_view::npos) end = bytes.size();
    // Empty lines are skipped so that a trailing newline does not add an empty assignment.
    if (end > start) overrides.emplace_back(bytes.substr(start, end - start));
    start = end + 1;
  }
  train::RunConfig config;
  const Outcome outcome = expect_clean({path, "--set "}, [&] { config = train::load_config(path, overrides); });
  if (outcome == Outcome::accepted) check_config_round_trip(config);
  return outcome;
}

// ------------------------------------------------------------------------------ libFuzzer glue

// The body of LLVMFuzzerTestOneInput: anything but a clean accept/reject is reported and turned into
// a crash, so libFuzzer saves the input.
inline int fuzz_one(Outcome (*run)(std::string_view, const Scratch&), const uint8_t* data, size_t size) {
  static const Scratch scratch;
  try {
    run(std::string_view(reinterpret_cast<const char*>(data), size), scratch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nfuzz: unexpected exception (not InputError): %s\n", e.what());
    __builtin_trap();
  } catch (...) {
    std::fprintf(stderr, "\nfuzz: unexpected exception of unknown type\n");
    __builtin_trap();
  }
  return 0;
}

}  // namespace normlab::fuzz
