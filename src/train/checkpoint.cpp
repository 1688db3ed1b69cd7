#include "normlab/train/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "normlab/error.hpp"
#include "normlab/io/atomic_file.hpp"
#include "normlab/io/json_depth.hpp"

namespace normlab::train {

namespace {

constexpr const char* kOptimizerPrefix = "optim.";

bool is_optimizer_name(const std::string& name) { return name.rfind(kOptimizerPrefix, 0) == 0; }

}  // namespace

std::unique_ptr<io::AtomicFileWriter> stage_checkpoint(const std::string& path, const nn::Module& model,
                                                       const optim::Optimizer* optimizer,
                                                       std::map<std::string, std::string> metadata) {
  metadata.insert_or_assign("format", std::string(kCheckpointFormat));
  metadata.insert_or_assign("format_version", std::string(kCheckpointVersion));
  // The tensors' bytes go to the file from where they are (about 3.6 MB for the demo's model and
  // Adam's moments), not through a copy per tensor and another of the whole file.
  const nn::NamedTensors parameters = model.named_parameters(), buffers = model.named_buffers();
  const nn::NamedTensors state = optimizer ? optimizer->state() : nn::NamedTensors{};
  std::vector<io::TensorView> views;
  for (const nn::NamedTensors* tensors : {&parameters, &buffers, &state})
    for (const auto& [name, tensor] : *tensors)
      views.push_back({name, "F32", tensor.shape(), tensor.data(), size_t(tensor.numel()) * sizeof(float)});
  return io::stage_safetensors(path, metadata, std::move(views));
}

void write_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer,
                      std::map<std::string, std::string> metadata) {
  stage_checkpoint(path, model, optimizer, std::move(metadata))->commit();
}

io::SafetensorsFile read_checkpoint(const std::string& path) {
  io::SafetensorsFile file = io::read_safetensors(path);
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kCheckpointFormat) {
    throw InputError(
        fmt::format("{}: not a normlab checkpoint (metadata 'format' is not \"{}\")", path, kCheckpointFormat));
  }
  auto version = file.metadata.find("format_version");
  if (version == file.metadata.end() || version->second != kCheckpointVersion) {
    throw InputError(fmt::format("{}: checkpoint format version \"{}\" is not supported (this normlab reads \"{}\")",
                                 path, version == file.metadata.end() ? "" : version->second, kCheckpointVersion));
  }
  return file;
}

void load_model_state(const io::SafetensorsFile& file, nn::Module& model) {
  nn::NamedTensors tensors = model.named_parameters();
  nn::NamedTensors buffers = model.named_buffers();
  tensors.insert(tensors.end(), buffers.begin(), buffers.end());
  // Check everything before copying anything, so a bad file leaves the model as it was.
  std::set<std::string> expected;
  std::vector<std::vector<float>> values;
  for (const auto& [name, tensor] : tensors) {
    expected.insert(name);
    values.push_back(file.floats(name, tensor.shape()));  // InputError "<path>: tensor 'name': ..."
  }
  for (const io::TensorRecord& record : file.tensors) {
    if (!expected.count(record.name) && !is_optimizer_name(record.name)) {
      throw InputError(
          fmt::format("{}: tensor '{}' is not part of the model this config describes", file.path, record.name));
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor target = tensors[i].second;
    std::copy(values[i].begin(), values[i].end(), target.data());
  }
}

std::map<std::string, std::vector<float>> optimizer_tensors(const io::SafetensorsFile& file,
                                                            const optim::Optimizer& optimizer) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, tensor] : optimizer.state()) out[name] = file.floats(name, tensor.shape());
  for (const io::TensorRecord& record : file.tensors) {
    if (is_optimizer_name(record.name) && !out.count(record.name)) {
      throw InputError(fmt::format("{}: tensor '{}' is not part of the state of this run's {} optimizer", file.path,
                                   record.name, optim::to_string(optimizer.options().name)));
    }
  }
  return out;
}

const std::string& metadata_value(const io::SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) throw InputError(fmt::format("{}: metadata '{}' is missing", file.path, key));
  return it->second;
}

nlohmann::json metadata_json(const io::SafetensorsFile& file, const std::string& key) {
  const std::string& text = metadata_value(file, key);
  io::require_json_depth(text, fmt::format("{}: metadata '{}'", file.path, key));
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || text.find('\0') != std::string::npos)
    throw InputError(fmt::format("{}: metadata '{}' is not valid JSON", file.path, key));
  return value;
}

int64_t metadata_int(const io::SafetensorsFile& file, const std::string& key) {
  const std::string& text = metadata_value(file, key);
  int64_t value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw InputError(fmt::format("{}: metadata '{}' must be a non-negative integer, got \"{}\"", file.path, key, text));
  }
  return value;
}

}  // namespace normlab::train
