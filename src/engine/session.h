// A running model: the loaded weights, a KV cache per layer on that layer's device, and the
// position bookkeeping. Builds a step's graph once per step shape and hands it to the executor,
// which keeps its schedule, workspace layout and device programs: a decode step only rewrites its
// input tensors (tokens, positions, the cache position).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "models/decoder.h"
#include "models/vision_tower.h"
#include "plan/limits.h"
#include "runtime/executor.h"
#include "runtime/placement.h"
#include "runtime/state_store.h"
#include "runtime/weight_store.h"

namespace ferry {

// The vision tower's inputs for one or more vision inputs (images, or an image's slices), on the
// host, as an image processor (engine/image_processor.h) makes them.
struct VisionBatch {
  std::vector<VisionGrid> grids;   // per vision input, in order
  std::vector<float> patches;      // [sum patches, channels * patch * patch] (build_tower's "patches")
  std::vector<int32_t> positions;  // [sum tower tokens] (build_tower's "vision_positions")
};

class Session {
 public:
  // `context`: KV-cache rows per layer (the longest prompt + generation this session can hold).
  // `max_step_tokens`: longer inputs are evaluated in chunks of this many tokens (the plan's
  // RunLimits::prefill_chunk), which bounds the activations a step holds. `kv_dtype`: the KV
  // cache's element type (the plan's RunLimits::kv_dtype; by default RunLimits' own default).
  // Error(Usage) for a kv_dtype the model's kv width cannot use (check_kv_cache_dtype).
  Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, int64_t context,
          int64_t max_step_tokens = RunLimits{}.prefill_chunk, DType kv_dtype = RunLimits{}.kv_dtype);
  // Everything from a plan's limits: context, step size and KV-cache dtype.
  Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, const RunLimits& limits);

  // Feeds tokens at explicit positions (positions are independent of cache slots: GLM-4V gives all
  // image tokens one position). Returns logits [rows, vocab] row-major: one row for the last token,
  // or one per token with all_logits. Throws Error(Usage) when the context is full.
  std::vector<float> eval(std::span<const int32_t> tokens, std::span<const int32_t> positions, bool all_logits = false);
  // Positions n_past .. n_past + n - 1.
  std::vector<float> eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Runs the vision tower and projector (models/vision.h) on `batch`; returns the image
  // embeddings [rows, hidden] row-major (vision_rows() per input), copied to host. Error(Usage) for
  // a model without vision or a batch whose sizes disagree.
  std::vector<float> encode_images(const VisionBatch& batch);
  // The same, left on the projector's device (f32 [rows, hidden]): handed to attach_images, they
  // reach the text embedding's device by one device-to-device copy.
  Tensor encode_images_on_device(const VisionBatch& batch);
  // Eval with image embeddings spliced in: token t takes row image_row[t] of
  // `image_embeds` ([rows, hidden] row-major, from encode_images) when image_row[t] >= 0, else its
  // token embedding (tokens[t] must still be a valid id).
  std::vector<float> eval_with_images(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                      std::span<const int32_t> image_row, std::span<const float> image_embeds,
                                      bool all_logits = false);
  // The same with the embeddings as a tensor f32 [rows, hidden], on host or on a device.
  std::vector<float> eval_with_images(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                      std::span<const int32_t> image_row, const Tensor& image_embeds,
                                      bool all_logits = false);
  // Image embeddings (from encode_images) of `inputs` vision inputs for the next eval(tokens),
  // which places them at the prompt's image spans (expand_image_prompt, from the session's next
  // position) and consumes them, so callers that only feed ids (the generation loop) take images
  // unchanged.
  void attach_images(std::vector<float> image_embeds, int64_t inputs);
  void attach_images(Tensor image_embeds, int64_t inputs);  // from encode_images_on_device
  bool has_attached_images() const { return attached_images_ > 0; }

  int64_t n_past() const { return n_past_; }  // cache rows filled
  int64_t next_position() const { return next_pos_; }
  int64_t context() const { return context_; }
  DType kv_dtype() const { return kv_dtype_; }
  int vocab() const { return spec_.config.vocab; }
  void reset();  // forget the conversation (cache contents are overwritten by later steps)
  // Keeps the first `n_past` cache rows and forgets the later ones (overwritten by later steps);
  // the next token goes at position `next_position` (== n_past for text; GLM-4V's image spans fill
  // more rows than positions). Error(Usage) beyond what the session holds.
  void truncate(int64_t n_past, int64_t next_position);

  const RunStats& last_stats() const { return executor_.stats(); }
  // The highest allocator peak a step of this session reached on `device` (weights and KV cache
  // included), 0 for a device no step used.
  size_t peak_bytes(const std::string& device) const;
  Executor& executor() { return executor_; }
  size_t workspace_bytes(const Device& device) const { return executor_.workspace_bytes(device); }
  const StateStore& states() const { return states_; }

 private:
  // The graph of every step with this many tokens (and logits rows), kept with its input tensors;
  // between steps only the attention ops' cache offset changes.
  struct StepGraph {
    StepGraph(int64_t n, bool all, int64_t images, Graph g)
        : n_tokens(n), all_logits(all), image_rows(images), graph(std::move(g)) {}
    int64_t n_tokens = 0;
    bool all_logits = false;
    int64_t image_rows = 0;  // > 0: the step taking image embeddings
    PreparedGraph graph;
    Tensor tokens;       // [n_tokens] i32, rewritten every step
    Tensor positions;    // [n_tokens] i32
    Tensor kv_position;  // [1] i32: the cache rows filled before the step
    Tensor logit_rows;   // [1] i32: the row whose logits come back (steps of several tokens)
    Tensor embed_rows;   // [n_tokens] i32 (image steps only)
    Executor::Inputs inputs;
  };
  StepGraph& step_graph(int64_t n_tokens, bool all_logits, int64_t image_rows = 0);
  std::vector<float> eval_step(std::span<const int32_t> tokens, std::span<const int32_t> positions, bool all_logits,
                               std::span<const int32_t> image_row = {}, const Tensor* image_embeds = nullptr);
  std::vector<float> eval_chunked(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                  std::span<const int32_t> image_row, const Tensor* image_embeds, bool all_logits);
  PreparedGraph& vision_graph(const VisionBatch& batch);  // checks the batch's sizes
  Executor::Inputs vision_inputs(const VisionBatch& batch) const;
  void record_peaks();

  const ModelSpec& spec_;
  StateStore states_;
  Executor executor_;
  int64_t context_;
  int64_t max_step_tokens_;
  DType kv_dtype_;
  int64_t n_past_ = 0;
  int64_t next_pos_ = 0;
  std::vector<std::unique_ptr<StepGraph>> step_graphs_;
  std::vector<std::pair<std::vector<VisionGrid>, std::unique_ptr<PreparedGraph>>> vision_graphs_;  // by grids
  Tensor attached_embeds_;  // for the next eval(tokens)
  int64_t attached_images_ = 0;
  std::vector<std::pair<std::string, size_t>> peaks_;  // device -> highest step peak  // the most recently used last
};

}  // namespace ferry
