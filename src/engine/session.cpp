#include "engine/session.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "engine/image_prompt.h"
#include "models/resampler.h"
#include "models/vision.h"

namespace ferry {

namespace {
// Step shapes whose graphs a session keeps: decode, and a few prompt lengths.
constexpr size_t kKeptStepGraphs = 4;
}  // namespace

Session::Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, int64_t context,
                 int64_t max_step_tokens, DType kv_dtype)
    : spec_(spec),
      executor_(placement, weights, states_),
      context_(context),
      max_step_tokens_(max_step_tokens),
      kv_dtype_(kv_dtype) {
  if (context <= 0) fail(ErrorKind::Usage, "the context must hold at least one token, got {}", context);
  if (max_step_tokens <= 0) fail(ErrorKind::Usage, "a step must take at least one token, got {}", max_step_tokens);
  check_kv_cache_dtype(spec.config, kv_dtype);
}

Session::Session(const ModelSpec& spec, const Placement& placement, const WeightStore& weights, const RunLimits& limits)
    : Session(spec, placement, weights, limits.max_context, limits.prefill_chunk, limits.kv_dtype) {}

size_t Session::peak_bytes(const std::string& device) const {
  for (const auto& [name, peak] : peaks_) {
    if (name == device) return peak;
  }
  return 0;
}

void Session::reset() {
  n_past_ = 0;
  next_pos_ = 0;
  attached_embeds_ = Tensor();
  attached_images_ = 0;
}

std::vector<float> Session::eval(std::span<const int32_t> tokens, bool all_logits) {
  if (attached_images_ > 0) {
    const ImagePrompt p = expand_image_prompt(spec_.config.vision, tokens, attached_images_, next_pos_);
    const Tensor embeds = std::move(attached_embeds_);
    attached_embeds_ = Tensor();
    attached_images_ = 0;
    return eval_with_images(p.tokens, p.positions, p.image_row, embeds, all_logits);
  }
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) positions[i] = static_cast<int32_t>(next_pos_ + static_cast<int64_t>(i));
  return eval(tokens, positions, all_logits);
}

Session::StepGraph& Session::step_graph(int64_t n_tokens, bool all_logits, int64_t image_rows) {
  auto it = std::find_if(step_graphs_.begin(), step_graphs_.end(), [&](const auto& s) {
    return s->n_tokens == n_tokens && s->all_logits == all_logits && s->image_rows == image_rows;
  });
  if (it != step_graphs_.end()) {
    std::rotate(it, it + 1, step_graphs_.end());  // most recently used last
    return *step_graphs_.back();
  }
  StepShape shape;
  shape.n_tokens = n_tokens;
  shape.kv_capacity = context_;
  shape.all_logits = all_logits;
  shape.kv_dtype = kv_dtype_;
  auto s = std::make_unique<StepGraph>(
      n_tokens, all_logits, image_rows,
      image_rows > 0 ? build_decoder_graph_with_images(spec_, shape, image_rows) : build_decoder_graph(spec_, shape));
  const Graph& g = s->graph.graph();
  if (g.outputs().size() != 1 || g.value(g.outputs()[0]).dtype != DType::F32) {
    fail(ErrorKind::Internal, "a decoder step must have one f32 output (its logits)");
  }
  s->tokens = Tensor::host(DType::I32, Shape{n_tokens}, "tokens");
  s->positions = Tensor::host(DType::I32, Shape{n_tokens}, "positions");
  s->kv_position = Tensor::host(DType::I32, Shape{1}, "kv_position");
  s->inputs = {{"tokens", s->tokens}, {"positions", s->positions}, {"kv_position", s->kv_position}};
  if (g.find("logit_rows") != kNoValue) {
    s->logit_rows = Tensor::host(DType::I32, Shape{1}, "logit_rows");
    *s->logit_rows.data_as<int32_t>() = static_cast<int32_t>(n_tokens - 1);
    s->inputs.emplace("logit_rows", s->logit_rows);
  }
  if (image_rows > 0) {
    // "image_embeds" is the caller's tensor, wherever it lives; set before every run.
    s->embed_rows = Tensor::host(DType::I32, Shape{n_tokens}, "embed_rows");
    s->inputs.emplace("embed_rows", s->embed_rows);
  }
  if (step_graphs_.size() == kKeptStepGraphs) step_graphs_.erase(step_graphs_.begin());
  step_graphs_.push_back(std::move(s));
  return *step_graphs_.back();
}

std::vector<float> Session::eval(std::span<const int32_t> tokens, std::span<const int32_t> positions, bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail(ErrorKind::Usage, "nothing to evaluate: the token list is empty");
  if (positions.size() != tokens.size()) {
    fail(ErrorKind::Usage, "{} tokens but {} positions", tokens.size(), positions.size());
  }
  if (n_past_ + n > context_) {
    fail(ErrorKind::Usage,
         "the context is full: {} cached + {} new tokens exceed {} (raise --ctx or shorten the prompt/generation)",
         n_past_, n, context_);
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= spec_.config.vocab) {
      fail(ErrorKind::Usage, "token id {} is outside the vocabulary [0, {})", id, spec_.config.vocab);
    }
  }
  return eval_chunked(tokens, positions, {}, nullptr, all_logits);
}

namespace {
// A host tensor [rows, hidden] holding `values` (rows = whole rows of the model's width).
Tensor host_rows(std::span<const float> values, int hidden) {
  const auto width = static_cast<size_t>(hidden);
  if (values.empty() || values.size() % width != 0) {
    fail(ErrorKind::Usage, "image embeddings of {} values are not whole rows of the model's width {}", values.size(),
         hidden);
  }
  Tensor t = Tensor::host(DType::F32, Shape{static_cast<int64_t>(values.size() / width), hidden}, "image_embeds");
  std::memcpy(t.data(), values.data(), values.size_bytes());
  return t;
}
}  // namespace

std::vector<float> Session::eval_with_images(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                             std::span<const int32_t> image_row, std::span<const float> image_embeds,
                                             bool all_logits) {
  return eval_with_images(tokens, positions, image_row, host_rows(image_embeds, spec_.config.hidden), all_logits);
}

std::vector<float> Session::eval_with_images(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                             std::span<const int32_t> image_row, const Tensor& image_embeds,
                                             bool all_logits) {
  if (image_row.size() != tokens.size()) {
    fail(ErrorKind::Usage, "{} tokens but {} image-row entries", tokens.size(), image_row.size());
  }
  if (!image_embeds.defined() || image_embeds.dtype() != DType::F32 || image_embeds.rank() != 2 ||
      image_embeds.dim(1) != spec_.config.hidden || image_embeds.dim(0) == 0) {
    fail(ErrorKind::Usage, "image embeddings must be f32 [rows, {}], got {}", spec_.config.hidden,
         image_embeds.defined() ? fmt::format("{} {}", dtype_name(image_embeds.dtype()), image_embeds.shape().str())
                                : std::string("none"));
  }
  const int64_t rows = image_embeds.dim(0);
  for (size_t t = 0; t < image_row.size(); ++t) {
    if (image_row[t] >= rows) {
      fail(ErrorKind::Usage, "token {} takes image row {}, but there are only {} image rows", t, image_row[t], rows);
    }
  }
  if (positions.size() != tokens.size()) {
    fail(ErrorKind::Usage, "{} tokens but {} positions", tokens.size(), positions.size());
  }
  if (n_past_ + static_cast<int64_t>(tokens.size()) > context_) {
    fail(ErrorKind::Usage,
         "the context is full: {} cached + {} new tokens exceed {} (raise --ctx or shorten the prompt/generation)",
         n_past_, tokens.size(), context_);
  }
  for (int32_t id : tokens) {
    if (id < 0 || id >= spec_.config.vocab) {
      fail(ErrorKind::Usage, "token id {} is outside the vocabulary [0, {})", id, spec_.config.vocab);
    }
  }
  return eval_chunked(tokens, positions, image_row, &image_embeds, all_logits);
}

std::vector<float> Session::eval_chunked(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                         std::span<const int32_t> image_row, const Tensor* image_embeds,
                                         bool all_logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  // Long prompts go in chunks, so no step holds more activations than the plan reserved.
  std::vector<float> all;
  for (int64_t start = 0; start < n; start += max_step_tokens_) {
    const auto len = static_cast<size_t>(std::min(max_step_tokens_, n - start));
    const auto at = static_cast<size_t>(start);
    // A chunk with no image token is a plain text step.
    std::span<const int32_t> rows = image_row.empty() ? image_row : image_row.subspan(at, len);
    if (std::all_of(rows.begin(), rows.end(), [](int32_t r) { return r < 0; })) rows = {};
    std::vector<float> part = eval_step(tokens.subspan(at, len), positions.subspan(at, len), all_logits, rows,
                                        rows.empty() ? nullptr : image_embeds);
    if (all_logits) {
      all.insert(all.end(), part.begin(), part.end());
    } else {
      all = std::move(part);
    }
  }
  return all;
}

PreparedGraph& Session::vision_graph(const VisionBatch& batch) {
  const VisionConfig& v = spec_.config.vision;
  if (!v.present()) fail(ErrorKind::Usage, "this model has no vision tower: it takes no images");
  int64_t patches = 0;
  int64_t tokens = 0;
  for (const VisionGrid& g : batch.grids) {
    patches += g.patches();
    tokens += tower_tokens(v, g);
  }
  const int64_t row = int64_t{v.in_channels} * v.patch * v.patch;
  if (static_cast<int64_t>(batch.patches.size()) != patches * row ||
      static_cast<int64_t>(batch.positions.size()) != tokens) {
    fail(ErrorKind::Usage,
         "a vision batch of {} input(s) ({} patches) needs {} patch values and {} positions, got {} and {}",
         batch.grids.size(), patches, patches * row, tokens, batch.patches.size(), batch.positions.size());
  }
  for (int32_t p : batch.positions) {
    if (p < 0 || p >= v.n_positions) {
      fail(ErrorKind::Usage, "vision position {} is outside the position table [0, {})", p, v.n_positions);
    }
  }
  auto it =
      std::find_if(vision_graphs_.begin(), vision_graphs_.end(), [&](const auto& g) { return g.first == batch.grids; });
  if (it == vision_graphs_.end()) {
    vision_graphs_.emplace_back(batch.grids, std::make_unique<PreparedGraph>(build_vision_graph(spec_, batch.grids)));
    it = vision_graphs_.end() - 1;
  }
  return *it->second;
}

Executor::Inputs Session::vision_inputs(const VisionBatch& batch) const {
  const VisionConfig& v = spec_.config.vision;
  const auto host = [](DType dtype, Shape shape, const void* data, const char* name) {
    Tensor t = Tensor::host(dtype, shape, name);
    std::memcpy(t.data(), data, t.nbytes());
    return t;
  };
  const auto patches = static_cast<int64_t>(batch.patches.size()) / (int64_t{v.in_channels} * v.patch * v.patch);
  Executor::Inputs in{{"patches", host(DType::F32, Shape{patches, int64_t{v.in_channels} * v.patch * v.patch},
                                       batch.patches.data(), "patches")},
                      {"vision_positions", host(DType::I32, Shape{static_cast<int64_t>(batch.positions.size())},
                                                batch.positions.data(), "vision_positions")}};
  if (v.family == VisionFamily::MiniCpmv) {
    const std::vector<float> pos = resampler_positions(spec_.config.hidden, batch.grids);
    in.emplace("resampler_positions",
               host(DType::F32, Shape{patches, spec_.config.hidden}, pos.data(), "resampler_positions"));
  }
  return in;
}

std::vector<float> Session::encode_images(const VisionBatch& batch) {
  PreparedGraph& graph = vision_graph(batch);
  const Value& out = graph.graph().value(graph.graph().outputs()[0]);
  std::vector<float> embeds(static_cast<size_t>(out.shape.numel()));
  Tensor into = Tensor::view(Storage::view(embeds.data(), embeds.size() * sizeof(float), nullptr), 0, out.dtype,
                             out.shape, out.name);
  executor_.run(graph, vision_inputs(batch), std::span<Tensor>(&into, 1));
  record_peaks();
  return embeds;
}

Tensor Session::encode_images_on_device(const VisionBatch& batch) {
  PreparedGraph& graph = vision_graph(batch);
  std::vector<Tensor> out = executor_.run_outputs_on_device(graph, vision_inputs(batch));
  record_peaks();
  return std::move(out.at(0));
}

void Session::attach_images(std::vector<float> image_embeds, int64_t inputs) {
  attach_images(host_rows(image_embeds, spec_.config.hidden), inputs);
}

void Session::attach_images(Tensor image_embeds, int64_t inputs) {
  const VisionConfig& v = spec_.config.vision;
  if (!v.present()) fail(ErrorKind::Usage, "this model has no vision tower: it takes no images");
  const int64_t rows = inputs * image_rows_per_input(v);
  if (inputs <= 0 || !image_embeds.defined() || image_embeds.dtype() != DType::F32 ||
      !(image_embeds.shape() == Shape{rows, spec_.config.hidden})) {
    fail(ErrorKind::Usage, "image embeddings {} do not hold {} vision input(s) of {} rows x {}",
         image_embeds.defined() ? image_embeds.shape().str() : std::string("(none)"), inputs, image_rows_per_input(v),
         spec_.config.hidden);
  }
  attached_embeds_ = std::move(image_embeds);
  attached_images_ = inputs;
}

void Session::record_peaks() {
  for (const auto& d : executor_.stats().devices) {
    auto it = std::find_if(peaks_.begin(), peaks_.end(), [&](const auto& p) { return p.first == d.device; });
    if (it == peaks_.end()) {
      peaks_.emplace_back(d.device, d.peak_bytes);
    } else {
      it->second = std::max(it->second, d.peak_bytes);
    }
  }
}

std::vector<float> Session::eval_step(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                                      bool all_logits, std::span<const int32_t> image_row, const Tensor* image_embeds) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t image_rows = image_row.empty() ? 0 : image_embeds->dim(0);
  StepGraph& step = step_graph(n, all_logits, image_rows);
  if (image_rows > 0) {
    // The embeddings are read where they are: on the projector's device they cross to the text
    // embedding's device by the scheduler's device-to-device copy (in place when it is the same).
    step.inputs.insert_or_assign("image_embeds", *image_embeds);
    auto* rows = step.embed_rows.data_as<int32_t>();
    for (int64_t t = 0; t < n; ++t) {
      const int32_t r = image_row[static_cast<size_t>(t)];
      rows[t] = r < 0 ? static_cast<int32_t>(t) : static_cast<int32_t>(n + r);
    }
  }
  *step.kv_position.data_as<int32_t>() = static_cast<int32_t>(n_past_);
  std::memcpy(step.tokens.data(), tokens.data(), tokens.size_bytes());
  std::memcpy(step.positions.data(), positions.data(), positions.size_bytes());

  // The executor copies the logits from their device straight into the vector returned.
  const Value& out = step.graph.graph().value(step.graph.graph().outputs()[0]);
  std::vector<float> logits(static_cast<size_t>(out.shape.numel()));
  Tensor into = Tensor::view(Storage::view(logits.data(), logits.size() * sizeof(float), nullptr), 0, out.dtype,
                             out.shape, out.name);
  if (image_rows == 0) {
    executor_.run(step.graph, step.inputs, std::span<Tensor>(&into, 1));
  } else {
    // The session holds no image beyond its step, even one that throws.
    try {
      executor_.run(step.graph, step.inputs, std::span<Tensor>(&into, 1));
    } catch (...) {
      step.inputs.erase("image_embeds");
      throw;
    }
    step.inputs.erase("image_embeds");
  }
  record_peaks();

  n_past_ += n;
  int32_t max_pos = positions[0];
  for (int32_t p : positions) max_pos = std::max(max_pos, p);
  next_pos_ = std::max<int64_t>(next_pos_, static_cast<int64_t>(max_pos) + 1);
  return logits;
}

void Session::truncate(int64_t n_past, int64_t next_position) {
  if (n_past < 0 || n_past > n_past_ || next_position < 0 || next_position > next_pos_) {
    fail(ErrorKind::Usage, "cannot keep {} cache rows at next position {}: the session holds {} rows, next position {}",
         n_past, next_position, n_past_, next_pos_);
  }
  n_past_ = n_past;
  next_pos_ = next_position;
}

}  // namespace ferry
