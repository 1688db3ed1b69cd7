// .npy reader/writer: round trips, numpy-written files, and malformed files refused with
// InputError("<path>: ...").
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "normlab/error.hpp"
#include "normlab/io/npy.hpp"

#include "support.hpp"

using normlab::test::TempDir;

namespace fs = std::filesystem;
using normlab::io::read_npy;
using normlab::io::read_npy_int;
using normlab::io::write_npy;

namespace {

// A scratch directory per test case, removed at scope exit.

// A hand-built .npy: version 1.0 preamble + header (padded to 64 bytes with '\n') + payload bytes.
std::string npy_bytes(const std::string& dict, const std::string& payload, const std::string& magic = "\x93NUMPY",
                      char major = 1) {
  std::string header = dict;
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = magic;
  out.push_back(major);
  out.push_back(0);
  out.push_back(char(header.size() & 0xff));
  out.push_back(char(header.size() >> 8));
  return out + header + payload;
}

template <typename T>
std::string payload_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// The message must start with the path, then say what is wrong.
void check_refused(const std::string& path, const std::string& needle) {
  try {
    read_npy(path);
    FAIL("no InputError for " << path);
  } catch (const normlab::InputError& e) {
    std::string message = e.what();
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK_MESSAGE(message.find(needle) != std::string::npos, message);
  }
}

}  // namespace

TEST_CASE("npy round trip keeps shape and bits, including scalars and empty arrays") {
  TempDir dir("roundtrip");
  std::vector<float> values = {1.5f, -0.0f, 3.25e-38f, 1e30f, -7.0f, 0.1f};
  write_npy(dir.sub("a.npy"), {2, 3}, values.data());
  auto a = read_npy(dir.sub("a.npy"));
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  REQUIRE(a.data.size() == values.size());
  CHECK(std::memcmp(a.data.data(), values.data(), values.size() * sizeof(float)) == 0);

  float scalar = 42.0f;
  write_npy(dir.sub("s.npy"), {}, &scalar);
  auto s = read_npy(dir.sub("s.npy"));
  CHECK(s.shape.empty());
  REQUIRE(s.data.size() == 1);
  CHECK(s.data[0] == 42.0f);

  write_npy(dir.sub("e.npy"), {0, 4}, nullptr);
  auto e = read_npy(dir.sub("e.npy"));
  CHECK(e.shape == std::vector<int64_t>{0, 4});
  CHECK(e.data.empty());

  // numpy's layout: the data starts on a 64-byte boundary and the header ends with '\n'.
  std::ifstream f(dir.sub("a.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK((bytes.size() - values.size() * sizeof(float)) % 64 == 0);
  CHECK(bytes[bytes.size() - values.size() * sizeof(float) - 1] == '\n');
  CHECK(bytes.find("'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") != std::string::npos);
}

TEST_CASE("npy reads numpy-written golden files, float64 and integer payloads") {
  auto gamma = read_npy(std::string(NORMLAB_TEST_DATA_DIR) + "/layernorm/bert_4x100x512/gamma.npy");
  CHECK(gamma.shape == std::vector<int64_t>{512});
  CHECK(gamma.data.size() == 512);

  TempDir dir("dtypes");
  std::vector<double> doubles = {0.5, -2.25, 1e-3};
  write_bytes(dir.sub("f8.npy"),
              npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", payload_of(doubles)));
  auto f8 = read_npy(dir.sub("f8.npy"));
  CHECK(f8.shape == std::vector<int64_t>{3});
  CHECK(f8.data == std::vector<float>{0.5f, -2.25f, float(1e-3)});

  std::vector<int64_t> i8 = {3, -1, 1LL << 40, 0};
  write_bytes(dir.sub("i8.npy"),
              npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", payload_of(i8)));
  std::vector<int64_t> shape;
  CHECK(read_npy_int(dir.sub("i8.npy"), &shape) == i8);
  CHECK(shape == std::vector<int64_t>{2, 2});

  std::vector<int32_t> i4 = {7, -8, 9};
  write_bytes(dir.sub("i4.npy"),
              npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", payload_of(i4)));
  CHECK(read_npy_int(dir.sub("i4.npy")) == std::vector<int64_t>{7, -8, 9});

  std::vector<float> float_ints = {1.0f, 2.0f, -3.0f};
  write_npy(dir.sub("fi.npy"), {3}, float_ints.data());
  CHECK(read_npy_int(dir.sub("fi.npy")) == std::vector<int64_t>{1, 2, -3});
  std::vector<float> not_ints = {1.0f, 2.5f};
  write_npy(dir.sub("fn.npy"), {2}, not_ints.data());
  CHECK_THROWS_AS(read_npy_int(dir.sub("fn.npy")), normlab::InputError);
  // Integers are not floats: read_npy refuses '<i8'.
  CHECK_THROWS_AS(read_npy(dir.sub("i8.npy")), normlab::InputError);
}

TEST_CASE("npy refuses malformed files with InputError naming the file") {
  TempDir dir("bad");
  std::vector<float> six = {1, 2, 3, 4, 5, 6};
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string good = npy_bytes(good_dict, payload_of(six));

  write_bytes(dir.sub("missing_payload.npy"), good.substr(0, good.size() - 5));
  check_refused(dir.sub("missing_payload.npy"), "truncated");

  write_bytes(dir.sub("cut_header.npy"), good.substr(0, 30));
  check_refused(dir.sub("cut_header.npy"), "truncated");

  write_bytes(dir.sub("tiny.npy"), good.substr(0, 4));
  check_refused(dir.sub("tiny.npy"), "truncated");

  write_bytes(dir.sub("magic.npy"), npy_bytes(good_dict, payload_of(six), "\x93NUMPZ"));
  check_refused(dir.sub("magic.npy"), "bad magic");

  write_bytes(dir.sub("version.npy"), npy_bytes(good_dict, payload_of(six), "\x93NUMPY", 9));
  check_refused(dir.sub("version.npy"), "version 9.0");

  write_bytes(dir.sub("fortran.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", payload_of(six)));
  check_refused(dir.sub("fortran.npy"), "fortran_order True");

  write_bytes(dir.sub("dtype.npy"),
              npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", payload_of(six)));
  check_refused(dir.sub("dtype.npy"), "unsupported dtype '<f2'");

  write_bytes(dir.sub("bigendian.npy"),
              npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", payload_of(six)));
  check_refused(dir.sub("bigendian.npy"), "unsupported dtype '>f4'");

  write_bytes(dir.sub("extra.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", payload_of(six)));
  check_refused(dir.sub("extra.npy"), "trailing bytes");

  write_bytes(dir.sub("short.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (7,), }", payload_of(six)));
  check_refused(dir.sub("short.npy"), "truncated");

  // A corrupt shape asking for ~10^18 floats is refused before anything is allocated.
  write_bytes(dir.sub("absurd.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000000000), }",
                        payload_of(six)));
  check_refused(dir.sub("absurd.npy"), "truncated");
  write_bytes(dir.sub("overflow.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 9999), }",
                        payload_of(six)));
  check_refused(dir.sub("overflow.npy"), "absurdly large");

  write_bytes(dir.sub("nodict.npy"), npy_bytes("['descr', '<f4']", payload_of(six)));
  check_refused(dir.sub("nodict.npy"), "expected '{'");
  write_bytes(dir.sub("nokey.npy"), npy_bytes("{'descr': '<f4', 'shape': (6,), }", payload_of(six)));
  check_refused(dir.sub("nokey.npy"), "missing 'fortran_order'");
  write_bytes(dir.sub("badshape.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }", payload_of(six)));
  check_refused(dir.sub("badshape.npy"), "shape");
  write_bytes(dir.sub("unknown.npy"),
              npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", payload_of(six)));
  check_refused(dir.sub("unknown.npy"), "unexpected key 'x'");

  check_refused(dir.sub("does_not_exist.npy"), "cannot open");
}
