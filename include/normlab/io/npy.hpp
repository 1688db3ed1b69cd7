#pragma once
// NumPy .npy files (format versions 1.0, 2.0, 3.0; little-endian, C order). Used for golden parity
// data (tests/data/*) and for exporting tensors to Python. Every malformed file is refused with
// normlab::InputError("<path>: <what is wrong>") before anything is allocated from its header.
#include <cstdint>
#include <string>
#include <vector>

namespace normlab::io {

struct NpyArray {
  std::vector<int64_t> shape;  // () for a scalar
  std::vector<float> data;     // product(shape) values, C order
};

// dtype '<f4', or '<f8' converted to float.
NpyArray read_npy(const std::string& path);

// dtype '<i8' or '<i4', or '<f4' / '<f8' whose values are all integers. The shape goes to *shape if
// given.
std::vector<int64_t> read_npy_int(const std::string& path, std::vector<int64_t>* shape = nullptr);

// Writes a version 1.0 file: dtype '<f4', fortran_order False. data holds product(shape) floats.
void write_npy(const std::string& path, const std::vector<int64_t>& shape, const float* data);

}  // namespace normlab::io
