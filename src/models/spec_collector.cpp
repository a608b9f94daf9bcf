#include "models/spec_collector.h"

#include "core/error.h"
#include "models/tensor_names.h"

namespace ferry {

std::optional<StoredTensor> SpecCollector::stored(const std::string& name, const Shape& expected) const {
  if (!assumed_) return lookup_(name);
  const bool whole_blocks = expected.rank > 0 && expected[expected.rank - 1] % dtype_traits(*assumed_).block_size == 0;
  return StoredTensor{whole_blocks ? *assumed_ : DType::F16, expected};
}

void SpecCollector::add(ModuleSpec& module, LogicalTensor role, int layer, const Shape& expected, bool optional) {
  const auto name = tensor_name(config_, role, layer);
  if (!name) {
    if (!optional) {
      problems_.push_back(fmt::format("{} has no name for '{}' in this checkpoint layout", family_name(config_.family),
                                      logical_tensor_name(role)));
    }
    return;
  }
  ParamSpec p;
  p.name = *name;
  p.role = role;
  p.layer = layer_class(role) == LayerClass::Repeating ? layer : -1;
  p.shape = expected;
  add_checked(module, std::move(p), expected, optional);
}

void SpecCollector::add_named(ModuleSpec& module, const std::string& name, const Shape& expected, bool optional) {
  ParamSpec p;
  p.name = name;
  p.shape = expected;
  add_checked(module, std::move(p), expected, optional);
}

void SpecCollector::add_transformed(ModuleSpec& module, const std::string& graph_name, const std::string& source,
                                    const Shape& stored_shape, const WeightTransform& transform,
                                    const Shape& graph_shape) {
  ParamSpec p;
  p.name = graph_name;
  p.source = source;
  p.transform = transform;
  p.shape = graph_shape;
  add_checked(module, std::move(p), stored_shape, false);
}

void SpecCollector::add_checked(ModuleSpec& module, ParamSpec p, const Shape& stored_expected, bool optional) {
  const std::string& name = p.checkpoint_name();
  const auto found = stored(name, stored_expected);
  if (!found) {
    if (!optional) {
      if (missing_.size() < kMissingShown) missing_.push_back(name);
      ++n_missing_;
    }
    return;
  }
  // A [N] vector may be stored as [N] or [1, N]; matrices must match exactly.
  const bool vector_ok = stored_expected.rank == 1 && found->shape.numel() == stored_expected[0];
  if (!(found->shape == stored_expected) && !vector_ok) {
    problems_.push_back(fmt::format("tensor '{}' has shape {}, but the config needs {}", name, found->shape.str(),
                                    stored_expected.str()));
    return;
  }
  if (p.transform.any() && (dtype_traits(found->dtype).is_quantized || (p.transform.transpose && p.shape.rank != 2))) {
    // Row ranges and transposes are made for float matrices (the vision weights that need them).
    problems_.push_back(
        fmt::format("tensor '{}' is stored as {}, but ferry reads it split or transposed, which "
                    "needs f32, f16 or bf16",
                    name, dtype_name(found->dtype)));
    return;
  }
  p.stored_dtype = found->dtype;
  p.compute_dtype = p.shape.rank == 1 ? DType::F32 : found->dtype;
  module.params.push_back(std::move(p));
}

void SpecCollector::finish(const std::string& source) const {
  if (missing_.empty() && problems_.empty()) return;
  std::string msg =
      fmt::format("{}: the tensors do not fit the {} model the config describes{}:", source,
                  family_name(config_.family), config_.architecture.empty() ? "" : " (" + config_.architecture + ")");
  if (n_missing_ > 0) {
    msg += fmt::format("\n  {} missing tensor(s):", n_missing_);
    for (const auto& name : missing_) msg += "\n    " + name;
    if (missing_.size() < n_missing_) msg += fmt::format("\n    ... and {} more", n_missing_ - missing_.size());
  }
  for (const auto& p : problems_) msg += "\n  " + p;
  msg += config_.layout == TensorLayout::Gguf
             ? "\n  the GGUF metadata does not describe these tensors: the file may be damaged or from another "
               "converter"
             : "\n  check that config.json belongs to these weights and that every shard is present";
  throw Error(ErrorKind::Shape, msg);
}

}  // namespace ferry
