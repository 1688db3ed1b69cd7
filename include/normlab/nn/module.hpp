#pragma once
// Module: a named tree of parameters, like torch.nn.Module. Names follow PyTorch's state_dict
// ("layers.0.self_attn.in_proj_weight"), so checkpoints map one-to-one onto PyTorch models.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "normlab/tensor.hpp"

namespace normlab::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Trainable tensors (requires_grad) with their full dotted names, in registration order.
  NamedTensors named_parameters() const;
  // Non-trainable state that still belongs in a checkpoint (BatchNorm's running statistics).
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;

  void train(bool on = true);  // recursively
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();

 protected:
  Tensor& register_parameter(const std::string& name, Tensor tensor);
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  // An empty name adds the child's tensors under their own names, unprefixed (EncoderModel holds
  // a TransformerEncoder whose names stay "layers.N...", as in PyTorch).
  void register_module(const std::string& name, Module& child);

 private:
  void collect(const std::string& prefix, NamedTensors& out, bool buffers) const;
  // Stable addresses: each entry is created once in a constructor and never moved.
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::unique_ptr<Tensor>> storage_;
  bool training_ = true;
};

}  // namespace normlab::nn
