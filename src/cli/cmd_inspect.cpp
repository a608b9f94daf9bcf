#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_setup.h"
#include "core/device.h"
#include "core/error.h"
#include "engine/checkpoint.h"
#include "engine/generator.h"

namespace ferry::cli {

namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
  bool tensors = false;
};

// The image side in one line: the tower, and what the family adds.
std::string vision_text(const VisionConfig& v) {
  std::string s = fmt::format("{}: {} tower of {} layers, hidden {}, {} heads, ffn {}, {}px patches",
                              vision_family_name(v.family), v.layout == VisionLayout::Siglip ? "SigLIP" : "EVA2-CLIP",
                              v.n_layer, v.hidden, v.n_head, v.ffn, v.patch);
  if (v.family == VisionFamily::MiniCpmv) {
    s += fmt::format("; resampler of {} queries; images at about {}px, sliced into up to {} cells", v.query_num,
                     v.scale_resolution, v.max_slices);
  } else {
    s += fmt::format("; {}px images, {} embeddings each", v.image_size, v.text_tokens());
  }
  return s;
}

const char* rope_style_name(RopeStyle s) {
  return s == RopeStyle::Adjacent ? "adjacent pairs" : "half-split";
}

// The headers as stored, for a checkpoint that does not open as a model: the tensors are what a
// user needs to see to find the mismatch.
void print_stored_tensors(const std::string& path) {
  const TensorSet tensors = open_checkpoint_tensors(path);
  std::vector<const TensorRecord*> sorted;
  for (const auto& r : tensors.all()) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const auto* x, const auto* y) { return x->name < y->name; });
  fmt::print("stored tensors ({}), not checked against the config:\n", sorted.size());
  for (const auto* r : sorted) fmt::print("  {:<60} {:<6} {}\n", r->name, dtype_name(r->dtype), r->shape.str());
  std::fflush(stdout);
}

Checkpoint open_for_inspect(const InspectArgs& a) {
  try {
    return open_checkpoint(a.path);
  } catch (const Error& e) {
    // A checkpoint whose tensors do not fit its config: list them, then report why.
    if (a.tensors && !a.json && (e.kind() == ErrorKind::Shape || e.kind() == ErrorKind::Config)) {
      try {
        print_stored_tensors(a.path);
      } catch (const Error&) {
        // The headers themselves are broken: the first error says it.
      }
    }
    throw;
  }
}

int run_inspect(const InspectArgs& a) {
  const Checkpoint ck = open_for_inspect(a);
  const ModelConfig& c = ck.config();
  std::map<std::string, std::pair<size_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
  for (const auto& r : ck.tensors.all()) {
    auto& e = by_dtype[std::string(dtype_name(r.dtype))];
    e.first += 1;
    e.second += r.nbytes;
  }
  const auto tokenizer = load_checkpoint_tokenizer(ck);
  const auto eog = end_of_generation_ids(ck, tokenizer ? &*tokenizer : nullptr);

  if (a.json) {
    nlohmann::json j;
    j["path"] = a.path;
    j["format"] = ck.is_gguf ? "gguf" : "safetensors";
    j["architecture"] = c.architecture;
    j["family"] = family_name(c.family);
    j["parameters"] = ck.spec.parameter_count();
    j["weight_bytes"] = ck.weight_bytes();
    j["layers"] = c.n_layer;
    j["hidden"] = c.hidden;
    j["heads"] = c.n_head;
    j["kv_heads"] = c.n_kv_head;
    j["head_dim"] = c.head_dim;
    j["ffn"] = c.ffn;
    j["vocab"] = c.vocab;
    j["context"] = c.max_context;
    j["rope"] = {{"dims", c.n_rot},
                 {"style", rope_style_name(c.rope_style)},
                 {"theta", c.rope_theta},
                 {"freq_scale", c.rope_freq_scale}};
    j["eos_ids"] = eog;
    j["bos_id"] = c.bos_id;
    j["chat_template"] = ck.has_chat_template;
    j["tokenizer"] = tokenizer.has_value();
    for (const auto& [dt, e] : by_dtype) j["dtypes"][dt] = {{"tensors", e.first}, {"bytes", e.second}};
    j["tensors"] = ck.tensors.all().size();
    if (c.vision.present()) {
      const VisionConfig& v = c.vision;
      j["vision"] = {{"family", vision_family_name(v.family)},
                     {"layers", v.n_layer},
                     {"hidden", v.hidden},
                     {"heads", v.n_head},
                     {"ffn", v.ffn},
                     {"patch", v.patch},
                     {"query_num", v.query_num},
                     {"max_slices", v.max_slices},
                     {"max_images", v.max_images}};
    }
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return 0;
  }
  fmt::print("model         {}\n", a.path);
  fmt::print("format        {}\n", ck.is_gguf ? "GGUF" : "safetensors (Hugging Face directory)");
  fmt::print("architecture  {} (family {})\n", c.architecture, family_name(c.family));
  fmt::print("parameters    {} ({}) in {} tensors, {}\n", parameter_count_text(ck.spec.parameter_count()),
             ck.spec.parameter_count(), ck.tensors.all().size(), format_bytes(ck.weight_bytes()));
  fmt::print("shape         {} layers, hidden {}, {} heads ({} kv heads) x {}, ffn {}, vocab {}\n", c.n_layer, c.hidden,
             c.n_head, c.n_kv_head, c.head_dim, c.ffn, c.vocab);
  fmt::print("rope          {} of {} dims, {}, base {}, scale {}\n", c.n_rot, c.head_dim, rope_style_name(c.rope_style),
             c.rope_theta, c.rope_freq_scale);
  fmt::print("context       {}\n", c.max_context);
  std::string flags;
  if (c.qkv_bias) flags += " qkv-bias";
  if (c.fused_qkv) flags += " fused-qkv";
  if (c.fused_gate_up) flags += " fused-gate-up";
  if (c.post_norms) flags += " post-norms";
  if (c.tied_embeddings) flags += " tied-embeddings";
  fmt::print("structure    {}\n", flags.empty() ? " (plain)" : flags);
  if (c.vision.present()) fmt::print("vision        {}\n", vision_text(c.vision));
  for (const auto& [dt, e] : by_dtype)
    fmt::print("dtype         {:<6} {} tensors, {}\n", dt, e.first, format_bytes(e.second));
  fmt::print("eos ids       {}\n", fmt::join(eog, ", "));
  fmt::print("bos id        {}\n", c.bos_id);
  fmt::print("tokenizer     {}\n", tokenizer ? fmt::format("{} tokens", tokenizer->n_vocab()) : std::string("none"));
  fmt::print("chat template {}\n", ck.has_chat_template ? "present" : "absent");
  if (a.tensors) {
    for (const auto& m : ck.spec.modules) {
      fmt::print("module {}\n", m.name);
      for (const auto& p : m.params) {
        fmt::print("  {:<60} {:<6} {}\n", p.name, dtype_name(p.stored_dtype), p.shape.str());
      }
    }
  }
  return 0;
}

}  // namespace

Runner add_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint without loading its weights");
  cmd->add_option("path", a->path, "A Hugging Face model directory or a GGUF file")->required();
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->add_flag("--tensors", a->tensors, "List every parameter by module");
  return [a] { return run_inspect(*a); };
}

}  // namespace ferry::cli
