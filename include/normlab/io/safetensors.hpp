#pragma once
// safetensors (https://github.com/huggingface/safetensors), the checkpoint format:
//   [8 bytes]  N, little-endian u64: length of the header
//   [N bytes]  UTF-8 JSON object, padded with trailing spaces:
//              {"__metadata__": {"key": "value", ...},          (optional, string -> string)
//               "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [rest]     the byte buffer; offsets are relative to its start, tensors are little-endian,
//              row-major, and tile the buffer exactly (no gaps, no overlaps, nothing left over).
// The reader checks all of that before it trusts any size. The writer is deterministic and, like the
// reference writer, keeps every tensor aligned to its element size: header padded to 8 bytes, then
// tensors ordered by element size (largest first) and by name within a size. It writes atomically.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace normlab::io {

class AtomicFileWriter;  // io/atomic_file.hpp

struct TensorRecord {
  std::string name;
  std::string dtype;  // "F32", "I64", "U8", ... (see safetensors_dtype_size)
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // product(shape) * dtype size bytes, little-endian, row-major
};

// Bytes per element of a safetensors dtype name (BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32
// U32 F32 F64 I64 U64), or 0 for a name we do not know.
size_t safetensors_dtype_size(const std::string& dtype);

struct SafetensorsFile {
  std::string path;  // where it was read from; prefixes every error message
  std::map<std::string, std::string> metadata;
  std::vector<TensorRecord> tensors;  // in file order (sorted by data offset)

  // nullptr if there is no tensor of that name.
  const TensorRecord* find(const std::string& name) const;
  // The tensor's values, after checking it exists, has the dtype and exactly `expected_shape`.
  // Throws InputError("<path>: tensor 'x': expected shape [2, 3] got [3, 2]") and the like.
  std::vector<float> floats(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  std::vector<int64_t> int64s(const std::string& name, const std::vector<int64_t>& expected_shape) const;
};

// Throws normlab::InputError("<path>: <what is wrong>[: tensor 'x' ...]") for any malformed file.
SafetensorsFile read_safetensors(const std::string& path);
// The same checks, but the tensors' bytes are not read (every `bytes` is empty): the metadata and
// the shapes of a large file for the price of its header.
SafetensorsFile read_safetensors_header(const std::string& path);

// The exact file contents write_safetensors would produce (independent of the order of `tensors`). Throws UsageError
// for records that are inconsistent (byte count vs shape, unknown dtype, duplicate or reserved names).
std::string serialize_safetensors(const std::map<std::string, std::string>& metadata,
                                  const std::vector<TensorRecord>& tensors);
// serialize_safetensors + write_file_atomic: the old file survives any failure.
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<TensorRecord>& tensors);

// A tensor's bytes where they already are (a model's parameters): written from there, not copied
// into a record first. `data` must stay valid until the write returns.
struct TensorView {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size = 0;  // product(shape) * dtype size bytes
};
// The same file bytes as the records' overload, each tensor written straight from its view.
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       std::vector<TensorView> tensors);
// The same, but not yet committed: the caller commits it (with other files: commit_together) or
// drops it (nothing written).
std::unique_ptr<AtomicFileWriter> stage_safetensors(const std::string& path,
                                                    const std::map<std::string, std::string>& metadata,
                                                    std::vector<TensorView> tensors);

// Records from plain row-major arrays of product(shape) elements (data may be null if that is 0).
TensorRecord make_f32(std::string name, std::vector<int64_t> shape, const float* data);
TensorRecord make_i64(std::string name, std::vector<int64_t> shape, const int64_t* data);
TensorRecord make_u8(std::string name, std::vector<int64_t> shape, const uint8_t* data);

// "[2, 3]": how shapes appear in error messages.
std::string format_shape(const std::vector<int64_t>& shape);

}  // namespace normlab::io
