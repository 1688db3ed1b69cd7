#pragma once
// checkpoint.safetensors: everything needed to continue a run exactly, in a format PyTorch users
// can open (docs/run-directory.md, docs/pytorch-interop.md).
//
//   tensors   model parameters and buffers under their PyTorch names, F32
//             ("layers.0.self_attn.in_proj_weight", "layers.0.norm1.running_mean", ...);
//             optimizer state "optim.exp_avg.<param>", "optim.exp_avg_sq.<param>", ...
//   metadata  "format" = "normlab.checkpoint", "format_version" = "1", "config" (resolved config
//             JSON), "step", and whatever the trainer adds (RNG and sampler states, ...).
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/io/atomic_file.hpp"
#include "normlab/io/safetensors.hpp"
#include "normlab/nn/module.hpp"
#include "normlab/optim/optimizer.hpp"

namespace normlab::train {

inline constexpr const char* kCheckpointFormat = "normlab.checkpoint";
inline constexpr const char* kCheckpointVersion = "1";

// Writes the model's parameters and buffers, the optimizer's state (if given) and `metadata` plus
// the format keys, atomically.
void write_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                      std::map<std::string, std::string> metadata);
// The same file, written but not committed (io::stage_safetensors).
std::unique_ptr<io::AtomicFileWriter> stage_checkpoint(const std::string& path, const nn::Module& model,
                                                       const optim::Optimizer* optimizer,
                                                       std::map<std::string, std::string> metadata);

// read_safetensors plus a check of the format keys: InputError "<path>: not a normlab checkpoint"
// or "<path>: checkpoint format version X is not supported".
io::SafetensorsFile read_checkpoint(const std::string& path);

// Copies every parameter and buffer of `model` from the file, checking each one's presence, dtype
// and shape first (nothing is modified if any check fails). A tensor outside the model and outside
// "optim." is an error too: the file describes a different model. InputError names the tensor.
void load_model_state(const io::SafetensorsFile& file, nn::Module& model);

// The optimizer's state tensors as name -> values, for Optimizer::load_state: every name in
// optimizer.state() must be present with its parameter's shape, and no other "optim." tensor may be
// (InputError naming the tensor).
std::map<std::string, std::vector<float>> optimizer_tensors(const io::SafetensorsFile& file,
                                                            const optim::Optimizer& optimizer);

// A metadata value that must be present: InputError "<path>: metadata 'key' is missing".
const std::string& metadata_value(const io::SafetensorsFile& file, const std::string& key);
// A metadata value holding JSON: InputError naming the key if it does not parse.
nlohmann::json metadata_json(const io::SafetensorsFile& file, const std::string& key);
// A metadata value holding a non-negative integer.
int64_t metadata_int(const io::SafetensorsFile& file, const std::string& key);

}  // namespace normlab::train
