#pragma once
// What a run will need in memory, estimated from its config before anything is allocated, so a
// typo (or an honest but too large config) is refused with exit 2 instead of ending in
// std::bad_alloc or the OOM killer. The estimate is the peak resident set of `normlab train`:
//
//   fixed          the program, its libraries and thread stacks
//   parameters     weights, gradients and two Adam moments: 4 floats per parameter
//   data           the validation set (its examples and their packed batches: 16 bytes a token)
//                  and file-backed data (through the file's size and line count)
//   + the largest of
//   training step  the graph of one training batch: per token and layer 16 d_model + 3 ffn floats
//                  and 2 * heads attention weights per key, plus 4 copies of the logits (logits,
//                  softmax, their gradients)
//   evaluation     one validation batch without a graph, and its logits
//   checkpoint     the tensors copied into records and the serialized file: 6 floats a parameter
//
// Lengths: generated data has uniform lengths, so a batch holds about its mean length (taken 1.1x
// for the batches above the mean); file data at its mean length from bytes per line (at most 3/4
// of the task's maximum, which filters longer lines out; 1.1x, and 1.25x for attention). tests/test_memory.cpp
// checks the estimate against the measured peak RSS of real runs (within 1.5x either way).
#include <string>

#include "normlab/train/config.hpp"

namespace normlab::train {

struct MemoryEstimate {
  double fixed = 0, parameters = 0, data = 0, training_step = 0, evaluation = 0, checkpoint = 0;  // bytes
  double total() const;
  std::string describe() const;  // "1.2 GiB (parameters 0.1, data 0.3, training step 0.8 GiB)"
};

MemoryEstimate estimate_memory(const RunConfig& config);

// The largest estimate a run may have: 16 GiB, or the machine's physical memory if that is less.
double memory_limit_bytes();

// `config` itself if its estimate is within memory_limit_bytes(), else InputError "model: this run
// would need about ..., more than the limit of ... GiB: reduce ..." (the command line puts the
// config's file in front). The trainer's first step, before it reads or allocates anything.
RunConfig fits_in_memory(RunConfig config);

}  // namespace normlab::train
