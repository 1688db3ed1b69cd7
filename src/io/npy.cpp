// .npy reader and writer. Format: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
//   "\x93NUMPY" major minor  header_len (uint16 LE for 1.0, uint32 LE for 2.0/3.0)  header  payload
// The header is a Python dict literal, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by '\n'. We parse exactly that grammar, nothing more.
#include "normlab/io/npy.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"

static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

namespace normlab::io {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy itself refuses headers above 10000 bytes unless told otherwise; anything bigger is not a
// file we wrote or want.
constexpr uint64_t kMaxNpyHeaderBytes = 1 << 16;

struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  bool has_descr = false, has_fortran_order = false, has_shape = false;
};

// A cursor over the header text; every failure names the file.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  Header parse() {
    Header header;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') {
        pos_++;
        break;
      }
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("header: 'descr' is not a simple dtype string (structured arrays are not supported)");
        header.descr = parse_string();
        header.has_descr = true;
      } else if (key == "fortran_order") {
        header.fortran_order = parse_bool();
        header.has_fortran_order = true;
      } else if (key == "shape") {
        header.shape = parse_shape();
        header.has_shape = true;
      } else {
        fail(fmt::format("header: unexpected key '{}'", key));
      }
      skip_space();
      if (peek() == ',') {
        pos_++;
      } else if (peek() != '}') {
        fail("header: expected ',' or '}' after a value");
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("header: unexpected text after the closing '}'");
    if (!header.has_descr) fail("header: missing 'descr'");
    if (!header.has_fortran_order) fail("header: missing 'fortran_order'");
    if (!header.has_shape) fail("header: missing 'shape'");
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", path_, what)); }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) pos_++;
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("header: expected '{}' at offset {}", c, pos_));
    pos_++;
  }
  std::string parse_string() {
    char quote = peek();
    if (quote != '\'' && quote != '"') fail(fmt::format("header: expected a quoted string at offset {}", pos_));
    pos_++;
    size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) fail("header: unterminated string");
    std::string value = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return value;
  }
  bool parse_bool() {
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail("header: 'fortran_order' must be True or False");
  }
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    while (true) {
      skip_space();
      if (peek() == ')') {
        pos_++;
        return shape;
      }
      if (peek() < '0' || peek() > '9') fail("header: 'shape' must be a tuple of non-negative integers");
      int64_t dim = 0;
      while (peek() >= '0' && peek() <= '9') {
        int digit = peek() - '0';
        if (dim > (std::numeric_limits<int64_t>::max() - digit) / 10)
          fail("header: a 'shape' dimension is absurdly large");
        dim = dim * 10 + digit;
        pos_++;
      }
      shape.push_back(dim);
      if (shape.size() > 64) fail("header: 'shape' has more than 64 dimensions");
      skip_space();
      if (peek() == ',') {
        pos_++;
      } else if (peek() != ')') {
        fail("header: expected ',' or ')' in 'shape'");
      }
    }
  }

  const std::string& path_;
  const std::string& text_;
  size_t pos_ = 0;
};

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

struct RawNpy {
  std::string descr;
  std::vector<int64_t> shape;
  int64_t count = 0;          // product(shape)
  std::vector<char> payload;  // count * itemsize bytes
};

size_t itemsize_of(const std::string& path, const std::string& descr, const std::vector<std::string>& accepted) {
  bool ok = false;
  for (const auto& a : accepted) ok = ok || a == descr;
  if (!ok) {
    std::string list;
    for (const auto& a : accepted) list += (list.empty() ? "'" : ", '") + a + "'";
    throw InputError(fmt::format("{}: unsupported dtype '{}' (expected one of {})", path, descr, list));
  }
  return descr == "<f8" || descr == "<i8" ? 8 : 4;
}

RawNpy read_raw(const std::string& path, const std::vector<std::string>& accepted_dtypes) {
  const std::unique_ptr<std::istream> stream = open_regular_stream(path);  // a regular file only
  std::istream& file = *stream;
  file.seekg(0, std::ios::end);
  const std::streamoff end = file.tellg();
  if (end < 0) throw InputError(fmt::format("{}: cannot determine the file size", path));
  const uint64_t file_size = uint64_t(end);
  file.seekg(0, std::ios::beg);

  // Magic, version, header length.
  unsigned char preamble[12] = {};
  if (file_size < 10)
    throw InputError(fmt::format("{}: truncated: {} bytes is too short for a .npy header", path, file_size));
  file.read(reinterpret_cast<char*>(preamble), 10);
  if (std::memcmp(preamble, kMagic, kMagicSize) != 0)
    throw InputError(fmt::format("{}: not a .npy file (bad magic)", path));
  const int major = preamble[6], minor = preamble[7];
  uint64_t header_len = 0;
  uint64_t preamble_size = 0;
  if (major == 1 && minor == 0) {
    header_len = uint64_t(preamble[8]) | (uint64_t(preamble[9]) << 8);
    preamble_size = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (file_size < 12)
      throw InputError(fmt::format("{}: truncated: {} bytes is too short for a .npy header", path, file_size));
    file.read(reinterpret_cast<char*>(preamble) + 10, 2);
    header_len = uint64_t(preamble[8]) | (uint64_t(preamble[9]) << 8) | (uint64_t(preamble[10]) << 16) |
                 (uint64_t(preamble[11]) << 24);
    preamble_size = 12;
  } else {
    throw InputError(fmt::format("{}: unsupported .npy format version {}.{}", path, major, minor));
  }
  if (header_len > kMaxNpyHeaderBytes)
    throw InputError(fmt::format("{}: header length {} is absurd", path, header_len));
  if (preamble_size + header_len > file_size) {
    throw InputError(fmt::format("{}: truncated: header length {} runs past the end of the {}-byte file", path,
                                 header_len, file_size));
  }
  std::string header_text(header_len, '\0');
  file.read(header_text.data(), std::streamsize(header_len));
  if (!file) throw InputError(fmt::format("{}: cannot read the header", path));

  Header header = HeaderParser(path, header_text).parse();
  if (header.fortran_order) {
    throw InputError(fmt::format("{}: fortran_order True is not supported (save a C-contiguous array)", path));
  }
  const size_t itemsize = itemsize_of(path, header.descr, accepted_dtypes);

  // The payload must hold exactly product(shape) items: check against the file size before
  // allocating anything, so a corrupt shape cannot ask for terabytes.
  const uint64_t payload_bytes = file_size - preamble_size - header_len;
  int64_t count = 1;
  for (int64_t dim : header.shape) {
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / int64_t(itemsize) / dim) {
      throw InputError(fmt::format("{}: shape {} is absurdly large", path, shape_string(header.shape)));
    }
    count *= dim;
  }
  const uint64_t needed = uint64_t(count) * itemsize;
  if (needed > payload_bytes) {
    throw InputError(fmt::format("{}: truncated: shape {} of '{}' needs {} bytes of data, the file has {}", path,
                                 shape_string(header.shape), header.descr, needed, payload_bytes));
  }
  if (needed < payload_bytes) {
    throw InputError(fmt::format("{}: shape {} of '{}' needs {} bytes of data, but the file has {} (trailing bytes)",
                                 path, shape_string(header.shape), header.descr, needed, payload_bytes));
  }

  RawNpy raw;
  raw.descr = header.descr;
  raw.shape = header.shape;
  raw.count = count;
  raw.payload.resize(size_t(needed));
  file.read(raw.payload.data(), std::streamsize(needed));
  if (!file) throw InputError(fmt::format("{}: cannot read the data", path));
  return raw;
}

template <typename T>
T load_item(const std::vector<char>& payload, int64_t i) {
  T value;
  std::memcpy(&value, payload.data() + size_t(i) * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  RawNpy raw = read_raw(path, {"<f4", "<f8"});
  NpyArray array;
  array.shape = raw.shape;
  array.data.resize(size_t(raw.count));
  if (raw.descr == "<f4") {
    if (raw.count > 0) std::memcpy(array.data.data(), raw.payload.data(), raw.payload.size());
  } else {
    for (int64_t i = 0; i < raw.count; i++) array.data[size_t(i)] = float(load_item<double>(raw.payload, i));
  }
  return array;
}

std::vector<int64_t> read_npy_int(const std::string& path, std::vector<int64_t>* shape) {
  RawNpy raw = read_raw(path, {"<i8", "<i4", "<f4", "<f8"});
  std::vector<int64_t> values(size_t(raw.count));
  for (int64_t i = 0; i < raw.count; i++) {
    if (raw.descr == "<i8") {
      values[size_t(i)] = load_item<int64_t>(raw.payload, i);
      continue;
    }
    if (raw.descr == "<i4") {
      values[size_t(i)] = load_item<int32_t>(raw.payload, i);
      continue;
    }
    double v = raw.descr == "<f4" ? double(load_item<float>(raw.payload, i)) : load_item<double>(raw.payload, i);
    // |v| < 2^53 keeps every integer exact and the conversion defined.
    if (!(std::fabs(v) < 9007199254740992.0) || v != std::trunc(v)) {
      throw InputError(fmt::format("{}: element {} is {}, not an integer", path, i, v));
    }
    values[size_t(i)] = int64_t(v);
  }
  if (shape != nullptr) *shape = raw.shape;
  return values;
}

void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) throw UsageError(fmt::format("write_npy: {}: negative dimension in shape", path));
    count *= dim;
  }
  if (count > 0 && data == nullptr) throw UsageError(fmt::format("write_npy: {}: data is null", path));
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", shape_string(shape));
  // Pad with spaces so that the data starts on a 64-byte boundary, as numpy does; end with '\n'.
  const size_t preamble_size = 10;
  size_t total = preamble_size + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) throw UsageError(fmt::format("write_npy: {}: shape too long for a 1.0 header", path));

  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw InputError(fmt::format("{}: cannot open for writing", path));
  const uint16_t header_len = uint16_t(header.size());
  const char version[2] = {1, 0};
  const char len_bytes[2] = {char(header_len & 0xff), char(header_len >> 8)};
  file.write(kMagic, kMagicSize);
  file.write(version, 2);
  file.write(len_bytes, 2);
  file.write(header.data(), std::streamsize(header.size()));
  if (count > 0) file.write(reinterpret_cast<const char*>(data), std::streamsize(size_t(count) * sizeof(float)));
  file.close();
  if (!file) throw InputError(fmt::format("{}: write failed", path));
}

}  // namespace normlab::io
