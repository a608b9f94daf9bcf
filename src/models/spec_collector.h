// Collects the parameters of a model's modules while checking each against the checkpoint, and
// remembers every problem so one error lists them all (make_decoder_spec's and the vision
// modules' shared bookkeeping).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/decoder.h"

namespace ferry {

class SpecCollector {
 public:
  // With `assumed` set, every tensor is taken to exist with the expected shape in that dtype (a
  // spec from config.json alone, for planning); `lookup` is not called.
  SpecCollector(const ModelConfig& config, const TensorLookup& lookup, std::optional<DType> assumed)
      : config_(config), lookup_(lookup), assumed_(assumed) {}

  // A tensor of the logical-tensor table, by its role in this config's layout.
  void add(ModuleSpec& module, LogicalTensor role, int layer, const Shape& expected, bool optional = false);
  // A tensor outside the table (a vision tower's), by its checkpoint name.
  void add_named(ModuleSpec& module, const std::string& name, const Shape& expected, bool optional = false);
  // A tensor the graph reads transformed (see WeightTransform) under `graph_name` in `graph_shape`;
  // `stored` is the shape the checkpoint must hold.
  void add_transformed(ModuleSpec& module, const std::string& graph_name, const std::string& source,
                       const Shape& stored, const WeightTransform& transform, const Shape& graph_shape);

  // Throws Error(Shape) listing every missing tensor and wrong shape met so far.
  void finish(const std::string& source) const;

 private:
  void add_checked(ModuleSpec& module, ParamSpec p, const Shape& stored_expected, bool optional);
  std::optional<StoredTensor> stored(const std::string& name, const Shape& expected) const;

  const ModelConfig& config_;
  const TensorLookup& lookup_;
  std::optional<DType> assumed_;
  static constexpr size_t kMissingShown = 12;
  std::vector<std::string> missing_;  // the first kMissingShown
  size_t n_missing_ = 0;
  std::vector<std::string> problems_;
};

}  // namespace ferry
