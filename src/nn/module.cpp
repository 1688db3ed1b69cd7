#include "normlab/nn/module.hpp"

namespace normlab::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor tensor) {
  tensor.set_requires_grad(true);
  storage_.push_back(std::make_unique<Tensor>(std::move(tensor)));
  params_.emplace_back(name, storage_.back().get());
  return *storage_.back();
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor) {
  storage_.push_back(std::make_unique<Tensor>(std::move(tensor)));
  buffers_.emplace_back(name, storage_.back().get());
  return *storage_.back();
}

void Module::register_module(const std::string& name, Module& child) { children_.emplace_back(name, &child); }

void Module::collect(const std::string& prefix, NamedTensors& out, bool buffers) const {
  for (const auto& [name, tensor] : buffers ? buffers_ : params_) out.emplace_back(prefix + name, *tensor);
  for (const auto& [name, child] : children_) child->collect(name.empty() ? prefix : prefix + name + ".", out, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, false);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

}  // namespace normlab::nn
