// safetensors reader/writer and atomic file writes: exact byte layout, round trips, a file from an
// independent writer, and one rejection test per way a header can lie.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/rng.hpp"

#include "support.hpp"

using normlab::test::TempDir;

namespace fs = std::filesystem;
using namespace normlab;
using namespace normlab::io;

namespace {

// A fresh directory per test, removed afterwards.

void write_bytes(const std::string& path, const std::string& bytes) {
  // Unlink rather than truncate: ext4 flushes a truncated-and-rewritten file on close, which made
  // the corruption sweep below take seconds instead of milliseconds.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string slurp(const std::string& path) { return read_file(path, 1 << 20); }

std::string u64_le(uint64_t value) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(char((value >> (8 * i)) & 0xff));
  return bytes;
}

// Length prefix + header exactly as given (no padding) + buffer.
std::string st_bytes(const std::string& header, const std::string& buffer) {
  return u64_le(header.size()) + header + buffer;
}

std::string zeros(size_t n) { return std::string(n, '\0'); }

// The InputError message read_safetensors gives, or a marker if it gave none / another exception.
std::string read_error(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "NO ERROR";
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// The message must start with the file name, say what is wrong, and be one line.
void check_rejected(const std::string& path, const std::string& fragment) {
  std::string message = read_error(path);
  INFO("file: ", path, "\nmessage: ", message, "\nexpected fragment: ", fragment);
  CHECK(message.rfind(path + ": ", 0) == 0);
  CHECK(contains(message, fragment));
  CHECK(!contains(message, "\n"));
}

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

}  // namespace

TEST_CASE("safetensors writer output matches a hand-built byte layout") {
  TempDir dir;
  const float a[2] = {1.0f, -2.5f};
  const int64_t b[1] = {-2};
  std::vector<TensorRecord> tensors = {make_f32("a", {2}, a), make_i64("b", {1}, b)};
  write_safetensors(dir.sub("tiny.safetensors"), {{"k", "v"}}, tensors);

  // 133 bytes of JSON padded with 3 spaces to 136 = 0x88, then 8 bytes of b (8-byte elements
  // first, for alignment), then 8 bytes of a.
  const std::string header = R"({"__metadata__":{"k":"v"},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}   )";
  const unsigned char length[8] = {0x88, 0, 0, 0, 0, 0, 0, 0};
  const unsigned char data[16] = {0xfe, 0xff, 0xff, 0xff,                          // -2 as little-endian int64
                                  0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x80, 0x3f,  // 1.0f
                                  0x00, 0x00, 0x20, 0xc0};                         // -2.5f
  std::string expected(reinterpret_cast<const char*>(length), 8);
  expected += header;
  expected.append(reinterpret_cast<const char*>(data), 16);

  std::string written = slurp(dir.sub("tiny.safetensors"));
  CHECK(written.size() == 8 + 136 + 16);
  CHECK(written == expected);
  CHECK(serialize_safetensors({{"k", "v"}}, tensors) == expected);
  // Same records in the other order: identical bytes.
  CHECK(serialize_safetensors({{"k", "v"}}, {tensors[1], tensors[0]}) == expected);
  // Written from views of the arrays (a checkpoint's tensors, no copy), in either order: the same bytes.
  const std::vector<TensorView> views = {{"a", "F32", {2}, a, sizeof a}, {"b", "I64", {1}, b, sizeof b}};
  write_safetensors(dir.sub("views.safetensors"), {{"k", "v"}}, views);
  CHECK(slurp(dir.sub("views.safetensors")) == expected);
  write_safetensors(dir.sub("views.safetensors"), {{"k", "v"}}, std::vector<TensorView>{views[1], views[0]});
  CHECK(slurp(dir.sub("views.safetensors")) == expected);
  // No metadata: the key is omitted, as the reference writer does; header stays 8-aligned.
  std::string bare = serialize_safetensors({}, tensors);
  CHECK(!contains(bare, "__metadata__"));
  CHECK((bare.size() - 16) % 8 == 0);
}

TEST_CASE("safetensors round trip keeps names, dtypes, shapes, exact bits and metadata") {
  TempDir dir;
  Rng rng(42);
  std::vector<float> weight(7 * 5);
  for (float& value : weight) value = rng.normal();
  // Bit patterns that a careless float path would change.
  weight[0] = std::numeric_limits<float>::quiet_NaN();
  weight[1] = -0.0f;
  weight[2] = std::numeric_limits<float>::infinity();
  weight[3] = std::numeric_limits<float>::denorm_min();
  const std::vector<int64_t> steps = {0, -1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  const std::vector<uint8_t> flags = {0, 1, 255, 7, 8, 9};
  const float scale = 0.125f;

  std::vector<TensorRecord> tensors = {
      make_f32("encoder.layers.0.norm1.weight", {7, 5}, weight.data()),
      make_i64("optimizer.step", {4}, steps.data()),
      make_u8("mask", {2, 3}, flags.data()),
      make_f32("scale", {}, &scale),
      make_f32("empty", {0, 3}, nullptr),
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"config", R"({"d_model": 8, "quote": "a\"b\\c"})"},
                                                       {"ünïcode", "✓\n"}};
  const std::string path = dir.sub("model.safetensors");
  write_safetensors(path, metadata, tensors);

  SafetensorsFile file = read_safetensors(path);
  CHECK(file.path == path);
  CHECK(file.metadata == metadata);
  REQUIRE(file.tensors.size() == 5);
  // File order is offset order: the writer puts larger elements first, then sorts by name, so
  // every tensor starts at a multiple of its element size.
  const char* names_in_order[] = {"optimizer.step", "empty", "encoder.layers.0.norm1.weight", "scale", "mask"};
  size_t offset = 0;
  for (size_t i = 0; i < 5; ++i) {
    CHECK(file.tensors[i].name == names_in_order[i]);
    CHECK(offset % safetensors_dtype_size(file.tensors[i].dtype) == 0);
    offset += file.tensors[i].bytes.size();
  }
  CHECK((slurp(path).size() - offset) % 8 == 0);  // the buffer itself starts 8-aligned
  for (const TensorRecord& original : tensors) {
    const TensorRecord* loaded = file.find(original.name);
    REQUIRE(loaded != nullptr);
    CHECK(loaded->dtype == original.dtype);
    CHECK(loaded->shape == original.shape);
    CHECK(loaded->bytes == original.bytes);
  }
  CHECK(file.find("missing") == nullptr);

  std::vector<float> loaded_weight = file.floats("encoder.layers.0.norm1.weight", {7, 5});
  REQUIRE(loaded_weight.size() == weight.size());
  for (size_t i = 0; i < weight.size(); ++i) CHECK(float_bits(loaded_weight[i]) == float_bits(weight[i]));
  CHECK(file.int64s("optimizer.step", {4}) == steps);
  CHECK(file.floats("scale", {}) == std::vector<float>{0.125f});
  CHECK(file.floats("empty", {0, 3}).empty());

  // Reading and rewriting gives the same bytes (the writer is a pure function of the content).
  const std::string copy = dir.sub("copy.safetensors");
  write_safetensors(copy, file.metadata, file.tensors);
  CHECK(slurp(copy) == slurp(path));
}

TEST_CASE("safetensors reads a file from an independent writer (scripts/golden/safetensors_reader.py)") {
  // Metadata last, pretty-printed JSON, keys in another order, offsets not in name order, an F32
  // tensor at an unaligned offset (30), a zero-sized tensor and a scalar.
  const std::string path = std::string(NORMLAB_TEST_DATA_DIR) + "/safetensors/sample.safetensors";
  SafetensorsFile file = read_safetensors(path);
  CHECK(file.metadata.size() == 2);
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.metadata.at("note") == "written by check_safetensors.py");
  REQUIRE(file.tensors.size() == 5);
  const char* offset_order[] = {"steps", "mask", "empty", "weight", "scale"};
  for (size_t i = 0; i < 5; ++i) CHECK(file.tensors[i].name == offset_order[i]);

  std::vector<float> weight = file.floats("weight", {2, 3});
  for (int i = 0; i < 6; ++i) CHECK(weight[i] == float(i) * 0.5f - 1.0f);
  CHECK(file.int64s("steps", {3}) == std::vector<int64_t>{3, -7, int64_t(1) << 40});
  const TensorRecord* mask = file.find("mask");
  REQUIRE(mask != nullptr);
  CHECK(mask->dtype == "U8");
  CHECK(mask->shape == std::vector<int64_t>{3, 2});
  CHECK(mask->bytes == std::vector<uint8_t>{1, 0, 0, 1, 1, 1});
  CHECK(file.floats("empty", {0, 4}).empty());
  CHECK(file.floats("scale", {}) == std::vector<float>{2.5f});
}

TEST_CASE("safetensors accepts valid edge cases") {
  TempDir dir;
  SUBCASE("no tensors, no buffer") {
    write_bytes(dir.sub("e.st"), st_bytes("{}", ""));
    SafetensorsFile file = read_safetensors(dir.sub("e.st"));
    CHECK(file.tensors.empty());
    CHECK(file.metadata.empty());
  }
  SUBCASE("zero-sized tensors share offsets with their neighbours; space padding") {
    const std::string header = R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("z0":{"dtype":"I64","shape":[3,0],"data_offsets":[0,0]},)"
                               R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}}       )";
    write_bytes(dir.sub("z.st"), st_bytes(header, zeros(6)));
    SafetensorsFile file = read_safetensors(dir.sub("z.st"));
    REQUIRE(file.tensors.size() == 4);
    CHECK(file.tensors[0].name == "z0");
    CHECK(file.tensors[1].name == "a");
    CHECK(file.tensors[2].name == "z1");
    CHECK(file.tensors[3].name == "b");
  }
}

TEST_CASE("safetensors rejects malformed files with one line naming the file and tensor") {
  TempDir dir;
  const std::string f32_2 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  struct Case {
    std::string label;
    std::string bytes;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"empty file", "", "file is 0 bytes, too short"},
      {"5 bytes", std::string("\x05\0\0\0\0", 5), "file is 5 bytes, too short"},
      {"header length absurd", u64_le(uint64_t(1) << 62) + "{}", "exceeds the limit of 100000000"},
      {"header length just over 100 MB", u64_le(100'000'001) + "{}", "exceeds the limit"},
      {"header length beyond the file", u64_le(200) + "{}", "exceeds the 2 bytes that follow"},
      {"header length zero", st_bytes("", ""), "header does not start with '{'"},
      {"header is an array", st_bytes("[1,2]", ""), "header does not start with '{'"},
      {"leading space", st_bytes(" {}", ""), "header does not start with '{'"},
      {"truncated JSON", st_bytes(R"({"a":1)", ""), "header is not valid JSON"},
      {"missing value", st_bytes(R"({"a": })", ""), "header is not valid JSON"},
      {"trailing garbage", st_bytes("{} x", ""), "header is not valid JSON"},
      {"invalid UTF-8", st_bytes("{\"\xff\xfe\":{}}", ""), "header is not valid JSON"},
      {"NUL padding", st_bytes(std::string("{}\0\0", 4), ""), "header is not valid JSON"},
      {"metadata not an object", st_bytes(R"({"__metadata__":"x"})", ""), "__metadata__ is not a JSON object"},
      {"metadata number value", st_bytes(R"({"__metadata__":{"k":1}})", ""),
       "__metadata__: value of 'k' is not a string"},
      {"metadata nested value", st_bytes(R"({"__metadata__":{"k":{"n":"v"}}})", ""),
       "__metadata__: value of 'k' is not a string"},
      {"entry not an object", st_bytes(R"({"w":3})", ""), "tensor 'w': entry is not a JSON object"},
      {"missing dtype", st_bytes(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': missing 'dtype'"},
      {"missing shape", st_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': missing 'shape'"},
      {"missing data_offsets", st_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", zeros(8)),
       "tensor 'w': missing 'data_offsets'"},
      {"dtype not a string", st_bytes(R"({"w":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': 'dtype' is not a string"},
      {"unknown dtype", st_bytes(R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': unknown dtype 'F17'"},
      {"lowercase dtype", st_bytes(R"({"w":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': unknown dtype 'f32'"},
      {"shape not an array", st_bytes(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': 'shape' is not an array"},
      {"negative dim", st_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': 'shape' must hold non-negative integers"},
      {"float dim", st_bytes(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': 'shape' must hold non-negative integers"},
      {"dim beyond int64",
       st_bytes(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': 'shape' must hold non-negative integers"},
      {"element count overflow",
       st_bytes(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': shape [4294967296, 4294967296, 16] has too many elements"},
      {"byte count overflow",
       st_bytes(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': shape [4611686018427387904] has too many elements"},
      {"one offset", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", zeros(8)),
       "tensor 'w': 'data_offsets' must be [begin, end]"},
      {"three offsets", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}})", zeros(8)),
       "tensor 'w': 'data_offsets' must be [begin, end]"},
      {"string offsets", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})", zeros(8)),
       "tensor 'w': 'data_offsets' must be [begin, end]"},
      {"negative offset", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", zeros(8)),
       "tensor 'w': 'data_offsets' must be [begin, end]"},
      {"offsets an object", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":{"b":0}}})", zeros(8)),
       "tensor 'w': 'data_offsets' must be [begin, end]"},
      {"begin after end", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", zeros(8)),
       "tensor 'w': data_offsets [8, 0] has begin > end"},
      {"end beyond buffer", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", zeros(7)),
       "tensor 'w': data_offsets end 8 is beyond the data buffer of 7 bytes"},
      {"huge end", st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", zeros(8)),
       "tensor 'w': data_offsets end 18446744073709551615 is beyond"},
      {"size does not match shape", st_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': data_offsets span 8 bytes but shape [3] of F32 needs 12"},
      {"first tensor not at 0", st_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8)),
       "tensor 'w': data_offsets begin 4 leaves a gap after byte 0"},
      {"gap between tensors",
       st_bytes(
           R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
           zeros(12)),
       "tensor 'b': data_offsets begin 8 leaves a gap after byte 4"},
      {"overlapping tensors",
       st_bytes(R"({"a":{)" + f32_2 + R"(},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8)),
       "tensor 'b': data_offsets [4, 8] overlap tensor 'a'"},
      {"same span twice", st_bytes(R"({"a":{)" + f32_2 + R"(},"b":{)" + f32_2 + "}}", zeros(8)), "overlap tensor"},
      {"bytes after the last tensor", st_bytes(R"({"w":{)" + f32_2 + "}}", zeros(12)),
       "data buffer has 12 bytes but the tensors cover only 8"},
      {"buffer without tensors", st_bytes("{}", zeros(4)), "data buffer has 4 bytes but the tensors cover only 0"},
      {"duplicate tensor name", st_bytes(R"({"w":{)" + f32_2 + R"(},"w":{)" + f32_2 + "}}", zeros(8)),
       "duplicate tensor name 'w'"},
      {"duplicate metadata key", st_bytes(R"({"__metadata__":{"k":"a","k":"b"}})", ""),
       "__metadata__: duplicate key 'k'"},
      {"duplicate __metadata__", st_bytes(R"({"__metadata__":{},"__metadata__":{}})", ""),
       "duplicate key '__metadata__'"},
      {"duplicate key in an entry",
       st_bytes(R"({"w":{"dtype":"F32","dtype":"I64","shape":[1],"data_offsets":[0,8]}})", zeros(8)),
       "tensor 'w': duplicate key 'dtype'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(cases[i].label);
    const std::string path = dir.sub("bad" + std::to_string(i) + ".safetensors");
    write_bytes(path, cases[i].bytes);
    check_rejected(path, cases[i].fragment);
  }

  check_rejected(dir.sub("does_not_exist.safetensors"), "cannot open: No such file or directory");
  check_rejected(dir.path.string(), "not a regular file");
}

TEST_CASE("safetensors: every truncation and header byte corruption gives InputError, never a crash") {
  TempDir dir;
  const float weight[6] = {1, 2, 3, 4, 5, 6};
  const int64_t step[1] = {9};
  const std::string good =
      serialize_safetensors({{"k", "v"}}, {make_f32("w", {2, 3}, weight), make_i64("step", {1}, step)});
  const std::string path = dir.sub("t.safetensors");

  for (size_t length = 0; length < good.size(); ++length) {
    CAPTURE(length);
    write_bytes(path, good.substr(0, length));
    CHECK(!contains(read_error(path), "ERROR TYPE"));
    CHECK(read_error(path) != "NO ERROR");
  }
  // Overwrite each byte of the length prefix and header with values likely to confuse a parser.
  // A few corruptions still give a valid file (e.g. "[2,3]" -> "[3,2]"), so only the exception
  // type is checked, never success.
  REQUIRE(good[1] == 0);  // header shorter than 256 bytes, so its length is good[0]
  const size_t header_end = 8 + size_t(uint8_t(good[0]));
  const char replacements[] = {'\0', '\xff', '9', '-', '"', '{', ']', ',', ' '};
  for (size_t position = 0; position < header_end; ++position) {
    for (char replacement : replacements) {
      if (good[position] == replacement) continue;
      std::string bad = good;
      bad[position] = replacement;
      write_bytes(path, bad);
      std::string message = read_error(path);
      INFO("position ", position, " replacement ", int(uint8_t(replacement)), ": ", message);
      CHECK(!contains(message, "WRONG EXCEPTION TYPE"));
    }
  }
}

TEST_CASE("safetensors floats()/int64s() check presence, dtype and shape") {
  TempDir dir;
  const float values[6] = {0, 1, 2, 3, 4, 5};
  const int64_t ids[2] = {4, 5};
  const std::string path = dir.sub("m.safetensors");
  write_safetensors(path, {}, {make_f32("linear1.weight", {2, 3}, values), make_i64("ids", {2}, ids)});
  SafetensorsFile file = read_safetensors(path);

  auto message_of = [&](auto&& call) -> std::string {
    try {
      call();
    } catch (const InputError& e) {
      return e.what();
    }
    return "NO ERROR";
  };
  CHECK(message_of([&] {
          file.floats("linear1.weight", {3, 2});
        }) == path + ": tensor 'linear1.weight': expected shape [3, 2] got [2, 3]");
  CHECK(message_of([&] { file.floats("linear1.weight", {6}); }) ==
        path + ": tensor 'linear1.weight': expected shape [6] got [2, 3]");
  CHECK(message_of([&] { file.floats("linear2.weight", {2, 3}); }) == path + ": tensor 'linear2.weight': missing");
  CHECK(message_of([&] { file.floats("ids", {2}); }) == path + ": tensor 'ids': expected dtype F32 got I64");
  CHECK(message_of([&] {
          file.int64s("linear1.weight", {2, 3});
        }) == path + ": tensor 'linear1.weight': expected dtype I64 got F32");
  CHECK(file.floats("linear1.weight", {2, 3}) == std::vector<float>{0, 1, 2, 3, 4, 5});
  CHECK(file.int64s("ids", {2}) == std::vector<int64_t>{4, 5});
}

TEST_CASE("safetensors writer rejects inconsistent records as UsageError and writes nothing") {
  TempDir dir;
  const std::string path = dir.sub("out.safetensors");
  write_file_atomic(path, std::string("previous"));
  const float values[2] = {1, 2};
  TensorRecord good = make_f32("w", {2}, values);

  TensorRecord short_bytes = good;
  short_bytes.bytes.pop_back();
  TensorRecord unknown_dtype = good;
  unknown_dtype.dtype = "F24";
  TensorRecord reserved = good;
  reserved.name = "__metadata__";
  TensorRecord negative = good;
  negative.shape = {-2, -1};

  CHECK_THROWS_AS(write_safetensors(path, {}, {short_bytes}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {}, {good, good}), UsageError);
  TensorRecord same_name_other_dtype = make_u8("w", {1}, reinterpret_cast<const uint8_t*>(values));
  CHECK_THROWS_AS(write_safetensors(path, {}, {good, same_name_other_dtype}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {}, {unknown_dtype}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {}, {reserved}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {}, {negative}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {{"k", "\xff"}}, {good}), UsageError);
  CHECK_THROWS_AS(make_f32("x", {-1}, values), UsageError);
  CHECK_THROWS_AS(make_f32("x", {2}, nullptr), UsageError);
  // Views are checked as records are, before anything is written.
  CHECK_THROWS_AS(write_safetensors(path, {}, std::vector<TensorView>{{"w", "F32", {2}, values, 4}}), UsageError);
  CHECK_THROWS_AS(write_safetensors(path, {}, std::vector<TensorView>{{"w", "F32", {2}, nullptr, 8}}), UsageError);
  CHECK(slurp(path) == "previous");
}

TEST_CASE("atomic write replaces the target and leaves no temporary files") {
  TempDir dir;
  const std::string path = dir.sub("summary.json");
  write_file_atomic(path, std::string("first version, longer than the second"));
  CHECK(slurp(path) == "first version, longer than the second");
  write_file_atomic(path, std::string("second"));
  CHECK(slurp(path) == "second");
  std::string binary("\0\x01\xff", 3);
  write_file_atomic(path, binary.data(), binary.size());
  CHECK(slurp(path) == binary);
  write_file_atomic(path, nullptr, 0);
  CHECK(slurp(path).empty());

  int entries = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    CHECK(entry.path().filename() == "summary.json");
    ++entries;
  }
  CHECK(entries == 1);

  // A bare file name (no directory part) writes into the working directory.
  const fs::path previous_cwd = fs::current_path();
  fs::current_path(dir.path);
  write_file_atomic("bare.txt", std::string("x"));
  fs::current_path(previous_cwd);
  CHECK(slurp(dir.sub("bare.txt")) == "x");
}

TEST_CASE("atomic write failures throw InputError and leave the previous file intact") {
  TempDir dir;
  auto message_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const InputError& e) {
      return e.what();
    }
    return "NO ERROR";
  };

  SUBCASE("parent is a regular file (blocks root too, unlike chmod)") {
    write_bytes(dir.sub("blocker"), "i am a file");
    const std::string path = dir.sub("blocker") + "/out.bin";
    CHECK(message_of([&] { write_file_atomic(path, std::string("data")); }) ==
          path + ": cannot write: Not a directory");
    CHECK(slurp(dir.sub("blocker")) == "i am a file");
  }
  SUBCASE("parent does not exist") {
    const std::string path = dir.sub("no/such/dir/out.bin");
    CHECK(message_of([&] { write_file_atomic(path, std::string("data")); }) ==
          path + ": cannot write: No such file or directory");
  }
  SUBCASE("target is a directory: the rename fails after the temp file was written") {
    const std::string path = dir.sub("target");
    fs::create_directory(path);
    write_bytes(dir.sub("target/inside"), "kept");
    std::string message = message_of([&] { write_file_atomic(path, std::string("data")); });
    CHECK(message.rfind(path + ": cannot write: ", 0) == 0);
    CHECK(slurp(dir.sub("target/inside")) == "kept");
    int entries = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++entries;
    CHECK(entries == 1);  // only "target": the temp file was removed
  }
  SUBCASE("write fails midway (file size limit): old checkpoint survives, temp removed") {
    const std::string path = dir.sub("checkpoint.safetensors");
    const float old_values[2] = {1, 2};
    write_safetensors(path, {}, {make_f32("w", {2}, old_values)});
    const std::string old_bytes = slurp(path);

    // RLIMIT_FSIZE makes write() fail with EFBIG past 64 bytes (SIGXFSZ ignored so it returns).
    std::vector<float> big(1000, 3.0f);
    struct rlimit saved_limit;
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved_limit) == 0);
    struct sigaction ignore_action = {}, saved_action = {};
    ignore_action.sa_handler = SIG_IGN;
    REQUIRE(sigaction(SIGXFSZ, &ignore_action, &saved_action) == 0);
    struct rlimit small_limit = saved_limit;
    small_limit.rlim_cur = 64;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small_limit) == 0);
    std::string message = message_of([&] { write_safetensors(path, {}, {make_f32("w", {1000}, big.data())}); });
    setrlimit(RLIMIT_FSIZE, &saved_limit);
    sigaction(SIGXFSZ, &saved_action, nullptr);

    CHECK(message == path + ": cannot write: File too large");
    CHECK(slurp(path) == old_bytes);
    CHECK(read_safetensors(path).floats("w", {2}) == std::vector<float>{1, 2});
    int entries = 0;
    for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path)) ++entries;
    CHECK(entries == 1);
  }
}

TEST_CASE("atomic read_file rejects missing files, directories and files over the limit") {
  TempDir dir;
  const std::string path = dir.sub("data.txt");
  write_bytes(path, "0123456789");
  CHECK(read_file(path, 10) == "0123456789");
  CHECK(read_file(path, 1000) == "0123456789");
  write_bytes(dir.sub("empty.txt"), "");
  CHECK(read_file(dir.sub("empty.txt"), 0).empty());

  auto message_of = [](const std::string& file, size_t limit) -> std::string {
    try {
      read_file(file, limit);
    } catch (const InputError& e) {
      return e.what();
    }
    return "NO ERROR";
  };
  CHECK(message_of(path, 9) == path + ": file is 10 bytes, larger than the limit of 9 bytes");
  CHECK(message_of(dir.sub("missing.txt"), 100) == dir.sub("missing.txt") + ": cannot open: No such file or directory");
  CHECK(message_of(dir.path.string(), 100) == dir.path.string() + ": not a regular file (a directory)");
  write_bytes(dir.sub("blocker"), "x");
  CHECK(message_of(dir.sub("blocker") + "/x", 100).rfind(dir.sub("blocker") + "/x: cannot open: ", 0) == 0);
}
