#include "normlab/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"
#include "normlab/io/json_strict.hpp"

namespace normlab::io {

// Tensor bytes are copied to and from host floats/ints with memcpy, which is only the file's
// little-endian layout on a little-endian host. Every platform we build for is; a big-endian port
// would byte-swap in floats()/int64s()/make_*.
static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian: add byte swapping for this host");

namespace {

using nlohmann::json;

// The reference implementation's limit: a header beyond this is an attack or corruption.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8},
};

std::string single_quoted(const std::string& name) { return "'" + name + "'"; }

// product(shape) * element_size, or false if a dimension is negative or the product overflows.
bool checked_byte_count(const std::vector<int64_t>& shape, size_t element_size, uint64_t* bytes) {
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return false;
    if (__builtin_mul_overflow(count, uint64_t(dim), &count)) return false;
  }
  return !__builtin_mul_overflow(count, uint64_t(element_size), bytes);
}

// A header entry after validation; begin/end are offsets into the byte buffer.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct ParsedHeader {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;  // sorted by (begin, end, name)
};

// nlohmann::json keeps the last of duplicate keys silently; a checkpoint with two tensors of the
// same name is corrupt. `path` holds the object keys leading to the first repeated key.
std::string duplicate_message(const std::vector<std::string>& path) {
  const std::string& key = path.back();
  if (path.size() == 1 && key == "__metadata__") return "duplicate key '__metadata__'";
  if (path.size() == 1) return "duplicate tensor name " + single_quoted(key);
  if (path.size() == 2 && path[0] == "__metadata__") return "__metadata__: duplicate key " + single_quoted(key);
  if (path.size() == 2) return "tensor " + single_quoted(path[0]) + ": duplicate key " + single_quoted(key);
  return "duplicate key " + single_quoted(key);
}

// A JSON integer in [0, 2^64), the only kind of number shapes and offsets may hold.
bool as_unsigned(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = uint64_t(value.get<int64_t>());
    return true;
  }
  return false;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& info, uint64_t buffer_bytes) {
  const std::string where = path + ": tensor " + single_quoted(name) + ": ";
  if (!info.is_object()) throw InputError(where + "entry is not a JSON object");
  Entry entry;
  entry.name = name;

  auto dtype_it = info.find("dtype");
  if (dtype_it == info.end()) throw InputError(where + "missing 'dtype'");
  if (!dtype_it->is_string()) throw InputError(where + "'dtype' is not a string");
  entry.dtype = dtype_it->get<std::string>();
  size_t element_size = safetensors_dtype_size(entry.dtype);
  if (element_size == 0) throw InputError(where + "unknown dtype " + single_quoted(entry.dtype));

  auto shape_it = info.find("shape");
  if (shape_it == info.end()) throw InputError(where + "missing 'shape'");
  if (!shape_it->is_array()) throw InputError(where + "'shape' is not an array");
  for (const json& dim : *shape_it) {
    uint64_t value = 0;
    if (!as_unsigned(dim, &value) || value > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw InputError(where + "'shape' must hold non-negative integers, got " + shape_it->dump());
    }
    entry.shape.push_back(int64_t(value));
  }
  uint64_t expected_bytes = 0;
  if (!checked_byte_count(entry.shape, element_size, &expected_bytes)) {
    throw InputError(where + "shape " + format_shape(entry.shape) + " has too many elements");
  }

  auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end()) throw InputError(where + "missing 'data_offsets'");
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !as_unsigned((*offsets_it)[0], &entry.begin) ||
      !as_unsigned((*offsets_it)[1], &entry.end)) {
    throw InputError(where + "'data_offsets' must be [begin, end] with non-negative integers, got " +
                     offsets_it->dump());
  }
  if (entry.begin > entry.end) {
    throw InputError(where + "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                     "] has begin > end");
  }
  if (entry.end > buffer_bytes) {
    throw InputError(where + "data_offsets end " + std::to_string(entry.end) + " is beyond the data buffer of " +
                     std::to_string(buffer_bytes) + " bytes");
  }
  if (entry.end - entry.begin != expected_bytes) {
    throw InputError(where + "data_offsets span " + std::to_string(entry.end - entry.begin) + " bytes but shape " +
                     format_shape(entry.shape) + " of " + entry.dtype + " needs " + std::to_string(expected_bytes));
  }
  return entry;
}

ParsedHeader parse_header(const std::string& path, const std::string& header, uint64_t buffer_bytes) {
  // The reference parser insists on '{' first (no leading whitespace); we match it so a file we
  // accept is one every other reader accepts.
  if (header.empty() || header[0] != '{') {
    throw InputError(path + ": header does not start with '{'");
  }
  // nlohmann::json stops at a NUL byte and ignores what follows; JSON text never holds one raw.
  if (header.find('\0') != std::string::npos) {
    throw InputError(path + ": header is not valid JSON: it contains a NUL byte");
  }
  require_json_depth(header, path + ": header");
  std::vector<std::string> duplicate;
  json root;
  try {
    root = parse_json_linear(header, &duplicate);
  } catch (const json::exception& e) {
    throw InputError(path + ": header is not valid JSON: " + json_error_message(e));
  }
  if (!root.is_object()) throw InputError(path + ": header is not a JSON object");
  if (!duplicate.empty()) throw InputError(path + ": " + duplicate_message(duplicate));

  ParsedHeader parsed;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw InputError(path + ": __metadata__ is not a JSON object");
      for (auto meta = it->begin(); meta != it->end(); ++meta) {
        if (!meta->is_string()) {
          throw InputError(path + ": __metadata__: value of " + single_quoted(meta.key()) + " is not a string");
        }
        parsed.metadata[meta.key()] = meta->get<std::string>();
      }
      continue;
    }
    parsed.entries.push_back(parse_entry(path, it.key(), *it, buffer_bytes));
  }

  // The tensors must tile [0, buffer_bytes): sorted by offset, each begins where the last ended.
  // Zero-sized tensors ([k, k]) may share an offset with a neighbour.
  std::sort(parsed.entries.begin(), parsed.entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < parsed.entries.size(); ++i) {
    const Entry& entry = parsed.entries[i];
    if (entry.begin < covered) {
      throw InputError(path + ": tensor " + single_quoted(entry.name) + ": data_offsets [" +
                       std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "] overlap tensor " +
                       single_quoted(parsed.entries[i - 1].name));
    }
    if (entry.begin > covered) {
      throw InputError(path + ": tensor " + single_quoted(entry.name) + ": data_offsets begin " +
                       std::to_string(entry.begin) + " leaves a gap after byte " + std::to_string(covered));
    }
    covered = entry.end;
  }
  if (covered != buffer_bytes) {
    throw InputError(path + ": data buffer has " + std::to_string(buffer_bytes) + " bytes but the tensors cover only " +
                     std::to_string(covered));
  }
  return parsed;
}

const TensorRecord& checked_tensor(const SafetensorsFile& file, const std::string& name, const char* dtype,
                                   const std::vector<int64_t>& expected_shape) {
  const TensorRecord* record = file.find(name);
  const std::string where = file.path + ": tensor " + single_quoted(name) + ": ";
  if (record == nullptr) throw InputError(where + "missing");
  if (record->dtype != dtype) {
    throw InputError(where + "expected dtype " + dtype + " got " + record->dtype);
  }
  if (record->shape != expected_shape) {
    throw InputError(where + "expected shape " + format_shape(expected_shape) + " got " + format_shape(record->shape));
  }
  return *record;
}

TensorRecord make_record(std::string name, const char* dtype, std::vector<int64_t> shape, const void* data) {
  uint64_t bytes = 0;
  if (!checked_byte_count(shape, safetensors_dtype_size(dtype), &bytes)) {
    throw UsageError("safetensors: tensor " + single_quoted(name) + ": invalid shape " + format_shape(shape));
  }
  if (bytes > 0 && data == nullptr) {
    throw UsageError("safetensors: tensor " + single_quoted(name) + ": null data for shape " + format_shape(shape));
  }
  TensorRecord record;
  record.name = std::move(name);
  record.dtype = dtype;
  record.shape = std::move(shape);
  record.bytes.resize(size_t(bytes));
  if (bytes > 0) std::memcpy(record.bytes.data(), data, size_t(bytes));
  return record;
}

// JSON string literal with escapes; the names come from our own code, so bad UTF-8 is misuse.
std::string json_string(const std::string& text, const std::string& what) {
  try {
    return json(text).dump();
  } catch (const json::exception&) {
    throw UsageError("safetensors: " + what + " is not valid UTF-8");
  }
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (dtype == info.name) return info.size;
  }
  return 0;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

const TensorRecord* SafetensorsFile::find(const std::string& name) const {
  for (const TensorRecord& record : tensors) {
    if (record.name == name) return &record;
  }
  return nullptr;
}

std::vector<float> SafetensorsFile::floats(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  const TensorRecord& record = checked_tensor(*this, name, "F32", expected_shape);
  std::vector<float> values(record.bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), record.bytes.data(), record.bytes.size());
  return values;
}

std::vector<int64_t> SafetensorsFile::int64s(const std::string& name,
                                             const std::vector<int64_t>& expected_shape) const {
  const TensorRecord& record = checked_tensor(*this, name, "I64", expected_shape);
  std::vector<int64_t> values(record.bytes.size() / sizeof(int64_t));
  if (!values.empty()) std::memcpy(values.data(), record.bytes.data(), record.bytes.size());
  return values;
}

namespace {

SafetensorsFile read_file_checked(const std::string& path, bool with_data) {
  io::ReadableFile in = io::open_regular_file(path);
  const uint64_t file_size = in.size();
  if (file_size < 8) {
    throw InputError(path + ": file is " + std::to_string(file_size) +
                     " bytes, too short for the 8-byte header length");
  }

  unsigned char length_bytes[8];
  if (!in.read(length_bytes, 8)) {
    throw InputError(path + ": cannot read the header length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | length_bytes[i];
  if (header_bytes > kMaxHeaderBytes) {
    throw InputError(path + ": header length " + std::to_string(header_bytes) + " exceeds the limit of " +
                     std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_bytes > file_size - 8) {
    throw InputError(path + ": header length " + std::to_string(header_bytes) + " exceeds the " +
                     std::to_string(file_size - 8) + " bytes that follow it in the file");
  }
  std::string header(size_t(header_bytes), '\0');
  if (header_bytes > 0 && !in.read(header.data(), size_t(header_bytes))) {
    throw InputError(path + ": cannot read the header");
  }

  const uint64_t buffer_bytes = file_size - 8 - header_bytes;
  ParsedHeader parsed = parse_header(path, header, buffer_bytes);

  SafetensorsFile file;
  file.path = path;
  file.metadata = std::move(parsed.metadata);
  file.tensors.reserve(parsed.entries.size());
  // Entries tile the buffer in order, so one sequential pass reads them all; each size was checked
  // against the buffer, which is bounded by the real file size.
  for (Entry& entry : parsed.entries) {
    TensorRecord record;
    record.name = std::move(entry.name);
    record.dtype = std::move(entry.dtype);
    record.shape = std::move(entry.shape);
    if (!with_data) {
      file.tensors.push_back(std::move(record));
      continue;
    }
    record.bytes.resize(size_t(entry.end - entry.begin));
    if (!record.bytes.empty() && !in.read(record.bytes.data(), record.bytes.size())) {
      throw InputError(path + ": tensor " + single_quoted(record.name) +
                       ": cannot read its data (file truncated while reading?)");
    }
    file.tensors.push_back(std::move(record));
  }
  return file;
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) { return read_file_checked(path, true); }

SafetensorsFile read_safetensors_header(const std::string& path) { return read_file_checked(path, false); }

namespace {

// The 8-byte length and the header of a file holding `tensors` (sorted here into file order, in
// which their bytes follow the header). Throws UsageError for inconsistent views.
std::string safetensors_prefix(const std::map<std::string, std::string>& metadata, std::vector<TensorView>& tensors) {
  // Element sizes are powers of two and the buffer starts 8-aligned, so largest-first order puts
  // every tensor at a multiple of its element size (zero-copy readers need that); name order
  // within a size makes the bytes independent of the caller's order.
  std::sort(tensors.begin(), tensors.end(), [](const TensorView& a, const TensorView& b) {
    size_t a_size = safetensors_dtype_size(a.dtype), b_size = safetensors_dtype_size(b.dtype);
    if (a_size != b_size) return a_size > b_size;
    return a.name < b.name;
  });

  // Compact JSON in the reference writer's layout: __metadata__ first (omitted when empty), then
  // one entry per tensor with keys in the order dtype, shape, data_offsets.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ",";
      first = false;
      header += json_string(key, "metadata key") + ":" + json_string(value, "metadata value of " + single_quoted(key));
    }
    header += "}";
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const TensorView& view : tensors) {
    const std::string where = "safetensors: tensor " + single_quoted(view.name) + ": ";
    if (view.name == "__metadata__") throw UsageError(where + "reserved name");
    if (!names.insert(view.name).second) throw UsageError(where + "duplicate name");
    size_t element_size = safetensors_dtype_size(view.dtype);
    if (element_size == 0) throw UsageError(where + "unknown dtype " + single_quoted(view.dtype));
    uint64_t expected_bytes = 0;
    if (!checked_byte_count(view.shape, element_size, &expected_bytes)) {
      throw UsageError(where + "invalid shape " + format_shape(view.shape));
    }
    if (expected_bytes != view.size) {
      throw UsageError(where + "has " + std::to_string(view.size) + " bytes but shape " + format_shape(view.shape) +
                       " of " + view.dtype + " needs " + std::to_string(expected_bytes));
    }
    if (view.size > 0 && view.data == nullptr) throw UsageError(where + "null data for shape " + format_shape(view.shape));
    if (header.size() > 1) header += ",";
    header += json_string(view.name, "tensor name") + ":{\"dtype\":\"" + view.dtype + "\",\"shape\":[";
    for (size_t d = 0; d < view.shape.size(); ++d) {
      if (d > 0) header += ",";
      header += std::to_string(view.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + expected_bytes) + "]}";
    offset += expected_bytes;
  }
  header += "}";
  // Pad so the buffer starts 8-byte aligned (8-byte prefix + header), as the reference does.
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + header.size());
  uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((header_bytes >> (8 * i)) & 0xff));
  out += header;
  return out;
}

std::vector<TensorView> views_of(const std::vector<TensorRecord>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (const TensorRecord& record : tensors)
    views.push_back({record.name, record.dtype, record.shape, record.bytes.data(), record.bytes.size()});
  return views;
}

}  // namespace

std::string serialize_safetensors(const std::map<std::string, std::string>& metadata,
                                  const std::vector<TensorRecord>& tensors) {
  std::vector<TensorView> views = views_of(tensors);
  std::string out = safetensors_prefix(metadata, views);
  size_t total = out.size();
  for (const TensorView& view : views) total += view.size;
  out.reserve(total);
  for (const TensorView& view : views) out.append(static_cast<const char*>(view.data), view.size);
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<TensorRecord>& tensors) {
  write_safetensors(path, metadata, views_of(tensors));
}

std::unique_ptr<AtomicFileWriter> stage_safetensors(const std::string& path,
                                                    const std::map<std::string, std::string>& metadata,
                                                    std::vector<TensorView> tensors) {
  const std::string prefix = safetensors_prefix(metadata, tensors);
  auto writer = std::make_unique<AtomicFileWriter>(path);
  writer->write(prefix);
  for (const TensorView& view : tensors) writer->write(view.data, view.size);
  return writer;
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       std::vector<TensorView> tensors) {
  stage_safetensors(path, metadata, std::move(tensors))->commit();
}

TensorRecord make_f32(std::string name, std::vector<int64_t> shape, const float* data) {
  return make_record(std::move(name), "F32", std::move(shape), data);
}

TensorRecord make_i64(std::string name, std::vector<int64_t> shape, const int64_t* data) {
  return make_record(std::move(name), "I64", std::move(shape), data);
}

TensorRecord make_u8(std::string name, std::vector<int64_t> shape, const uint8_t* data) {
  return make_record(std::move(name), "U8", std::move(shape), data);
}

}  // namespace normlab::io
