// Every op on a Vulkan device against the CPU backend, at shapes that are not multiples of the
// workgroup or tile sizes, for every weight dtype, through mapped memory and through staging.
// Without a Vulkan device the suite skips, saying why; with FERRY_REQUIRE_VULKAN=1 (CI) that fails.
#if FERRY_HAVE_VULKAN  // without the backend, test_vulkan_cli.cpp says why the suite skips
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/vulkan/context.h"
#include "backends/vulkan/device.h"
#include "backends/vulkan/lowering.h"
#include "core/error.h"
#include "graph/graph.h"
#include "kernels/reference.h"
#include "vulkan_available.h"

namespace ferry {
namespace {

Tensor random_f32(const Shape& shape, uint32_t seed, float scale = 1.0f) {
  Tensor t = Tensor::host(DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(rng);
  return t;
}

Tensor ids(std::vector<int32_t> values) {
  Tensor t = Tensor::host(DType::I32, Shape{static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

// The GGUF block types, each of which the Vulkan shaders read (shaders/quant.glsl).
constexpr DType kBlockTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL,
                                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};

// Weights of a block type: random bytes with small finite scales (test::random_weight), or random
// floats quantized by the CPU backend (kernels::from_f32), as a converter would write them.
Tensor block_weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed, bool from_floats) {
  if (!from_floats) return test::random_weight(dtype, rows, cols, seed);
  const Tensor f = random_f32(Shape{rows, cols}, seed);
  Tensor q = Tensor::host(dtype, f.shape(), "w");
  ThreadPool pool(1);
  kernels::from_f32(f, q, pool);
  return q;
}

class VulkanOps : public ferry::testing::VulkanTest<::testing::TestWithParam<bool>> {  // param: map device memory
 protected:
  void SetUp() override {
    VulkanTest::SetUp();
    if (no_device()) return;
    vk_ = std::make_unique<vulkan::VulkanDevice>(DeviceId::parse("vulkan:0"), Allocator::kUnlimited,
                                                 vulkan::DeviceOptions{GetParam()});
  }

  // Runs `op` on the CPU and on vulkan:0 with the same inputs; the two outputs (the CPU's first).
  std::pair<Tensor, Tensor> run(Op op, OpParams params, std::vector<Tensor> inputs, DType out_dtype,
                                const Shape& out_shape, std::vector<int> state_inputs = {}) {
    Node node;
    node.op = op;
    node.params = params;
    // CPU: on host copies (state inputs are written in place, so each side gets its own).
    std::vector<Tensor> cpu_in;
    for (const Tensor& t : inputs) {
      Tensor c = Tensor::host(t.dtype(), t.shape(), "in");
      std::memcpy(c.data(), t.data(), t.nbytes());
      cpu_in.push_back(c);
    }
    std::vector<Tensor*> cpu_ptrs;
    for (Tensor& t : cpu_in) cpu_ptrs.push_back(&t);
    Tensor cpu_out = Tensor::host(out_dtype, out_shape, "out");
    cpu::run_node(node, cpu_ptrs, cpu_out, cpu_pool_);

    std::vector<Tensor> vk_in;
    for (const Tensor& t : inputs) {
      Tensor v = Tensor::empty(*vk_, t.dtype(), t.shape(), "in");
      vk_->write(v, t.data());
      vk_in.push_back(v);
    }
    Tensor vk_out = Tensor::empty(*vk_, out_dtype, out_shape, "out");
    BoundOp bound;
    bound.node = &node;
    for (const Tensor& t : vk_in) bound.inputs.push_back(&t);
    bound.output = &vk_out;
    auto program = vk_->compile(std::span<const BoundOp>(&bound, 1));
    vk_->run(*program);
    Tensor back = Tensor::host(out_dtype, out_shape, "vk");
    vk_->read(vk_out, back.data());
    // State inputs (KV caches) come back too, compared by the caller through state_back_.
    state_back_.clear();
    for (int i : state_inputs) {
      Tensor s = Tensor::host(inputs[static_cast<size_t>(i)].dtype(), inputs[static_cast<size_t>(i)].shape());
      vk_->read(vk_in[static_cast<size_t>(i)], s.data());
      state_back_.push_back({cpu_in[static_cast<size_t>(i)], s});
    }
    vk_->synchronize();
    program.reset();
    return {cpu_out, back};
  }

  static void expect_close(const Tensor& want, const Tensor& got, double rel, const std::string& what) {
    ASSERT_EQ(want.numel(), got.numel());
    if (want.dtype() != DType::F32) {
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.nbytes()), 0) << what;
      return;
    }
    double scale = 0.0;
    for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(double(want.data_as<float>()[i])));
    const double tol = rel * std::max(scale, 1e-3);
    int bad = 0;
    for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
      const double a = want.data_as<float>()[i], b = got.data_as<float>()[i];
      if (!(std::fabs(a - b) <= tol)) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << a << " vulkan " << b << " (tolerance " << tol << ")";
        ++bad;
      }
    }
  }

  ThreadPool cpu_pool_{1};
  std::unique_ptr<vulkan::VulkanDevice> vk_;
  std::vector<std::pair<Tensor, Tensor>> state_back_;
};

TEST_P(VulkanOps, MatMulEveryWeightTypeAtAwkwardShapes) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    for (int64_t M : {1, 3, 9, 17}) {
      for (int64_t N : {1, 5, 67}) {
        for (int64_t K : {32, 96}) {
          for (bool bias : {false, true}) {
            std::vector<Tensor> in = {random_f32(Shape{M, K}, 1), test::random_weight(dt, N, K, 2)};
            if (bias) in.push_back(random_f32(Shape{N}, 3));
            auto [want, got] = run(Op::MatMul, std::monostate{}, in, DType::F32, Shape{M, N});
            expect_close(want, got, 2e-5,
                         fmt::format("matmul {} M {} N {} K {} bias {}", dtype_name(dt), M, N, K, bias));
          }
        }
      }
    }
  }
}

// Every GGUF block type, at rows of 256 and 512 (whole super-blocks), through both shader variants
// (M < 8: matmul_cols, else matmul_rows): weights of random bytes (every bit pattern of quants,
// scales and mins) and weights the CPU's quantizers made from floats. Both sides round x as
// llama.cpp does for the type (q8_0, q8_1 or q8_K). Rows of 2304 take the 64 invocations past
// their first 32-element group each (a second round, partly idle, for the 256-element types).
TEST_P(VulkanOps, MatMulEveryBlockType) {
  for (DType dt : kBlockTypes) {
    for (bool from_floats : {false, true}) {
      for (int64_t M : {1, 3, 9, 17}) {
        for (int64_t N : {1, 5, 67}) {
          for (int64_t K : {256, 512, 2304}) {
            if (K == 2304 && (N != 5 || M == 3)) continue;
            const bool bias = (M + N + K / 256) % 2 == 0;
            std::vector<Tensor> in = {random_f32(Shape{M, K}, 1), block_weight(dt, N, K, 2, from_floats)};
            if (bias) in.push_back(random_f32(Shape{N}, 3));
            auto [want, got] = run(Op::MatMul, std::monostate{}, in, DType::F32, Shape{M, N});
            expect_close(want, got, 2e-5,
                         fmt::format("matmul {} ({}) M {} N {} K {} bias {}", dtype_name(dt),
                                     from_floats ? "quantized" : "random bytes", M, N, K, bias));
          }
        }
      }
    }
  }
}

TEST_P(VulkanOps, EmbeddingEveryTableType) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    auto [want, got] = run(Op::Embedding, std::monostate{},
                           {test::random_weight(dt, 37, 64, 4), ids({0, 36, 5, 5, 17})}, DType::F32, Shape{5, 64});
    expect_close(want, got, 0.0, fmt::format("embedding {}", dtype_name(dt)));
  }
  // Every block type: the CPU's dequantized values bit for bit.
  for (DType dt : kBlockTypes) {
    for (bool from_floats : {false, true}) {
      for (int64_t H : {256, 512}) {
        auto [want, got] =
            run(Op::Embedding, std::monostate{}, {block_weight(dt, 37, H, 4, from_floats), ids({0, 36, 5, 5, 17})},
                DType::F32, Shape{5, H});
        expect_close(
            want, got, 0.0,
            fmt::format("embedding {} ({}) H {}", dtype_name(dt), from_floats ? "quantized" : "random bytes", H));
      }
    }
  }
}

TEST_P(VulkanOps, Elementwise) {
  const Shape s{3, 67};
  const Tensor a = random_f32(s, 5, 4.0f), b = random_f32(s, 6);
  for (Op op : {Op::Add, Op::Mul}) {
    auto [want, got] = run(op, std::monostate{}, {a, b}, DType::F32, s);
    expect_close(want, got, 1e-6, std::string(op_name(op)));
  }
  {
    auto [want, got] = run(Op::Scale, ScaleParams{0.37f}, {a}, DType::F32, s);
    expect_close(want, got, 1e-6, "scale");
  }
  for (Op op : {Op::Silu, Op::Gelu, Op::GeluTanh, Op::Softmax}) {
    auto [want, got] = run(op, std::monostate{}, {a}, DType::F32, s);
    expect_close(want, got, 2e-6, std::string(op_name(op)));
  }
  {
    auto [want, got] = run(Op::SwiGlu, std::monostate{}, {random_f32(Shape{5, 2 * 33}, 7)}, DType::F32, Shape{5, 33});
    expect_close(want, got, 2e-6, "swiglu fused");
  }
  {
    auto [want, got] = run(Op::SwiGlu, std::monostate{}, {random_f32(Shape{5, 33}, 8), random_f32(Shape{5, 33}, 9)},
                           DType::F32, Shape{5, 33});
    expect_close(want, got, 2e-6, "swiglu");
  }
}

TEST_P(VulkanOps, NormsWithEveryWeightType) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t H : {1, 63, 130}) {
      const Tensor x = random_f32(Shape{4, H}, 10, 3.0f);
      auto [want, got] = run(Op::RmsNorm, NormParams{1e-5f}, {x, test::random_weight(dt, 1, H, 11).reshape(Shape{H})},
                             DType::F32, x.shape());
      expect_close(want, got, 1e-5, fmt::format("rms_norm {} H {}", dtype_name(dt), H));
      auto [want2, got2] = run(
          Op::LayerNorm, NormParams{1e-6f},
          {x, test::random_weight(dt, 1, H, 12).reshape(Shape{H}), test::random_weight(dt, 1, H, 13).reshape(Shape{H})},
          DType::F32, x.shape());
      expect_close(want2, got2, 1e-5, fmt::format("layer_norm {} H {}", dtype_name(dt), H));
    }
  }
}

TEST_P(VulkanOps, RopeBothStylesPartialAndFarPositions) {
  for (RopeStyle style : {RopeStyle::Adjacent, RopeStyle::HalfSplit}) {
    for (int n_rot : {32, 16}) {
      RopeParams p;
      p.head_dim = 32;
      p.n_rot = n_rot;
      p.style = style;
      p.theta = 10000.0f;
      p.freq_scale = 0.5f;
      const Tensor x = random_f32(Shape{4, 3 * 32}, 14);
      auto [want, got] = run(Op::Rope, p, {x, ids({0, 1, 4095, 100000})}, DType::F32, x.shape());
      expect_close(want, got, 2e-6, fmt::format("rope style {} n_rot {}", static_cast<int>(style), n_rot));
    }
  }
}

TEST_P(VulkanOps, AttentionOverTheCacheWithAndWithoutThePositionInput) {
  for (int64_t T : {1, 5, 70}) {
    for (int64_t offset : {0, 3}) {
      AttentionParams p;
      p.n_head = 4;
      p.n_kv_head = 2;
      p.head_dim = 16;
      p.scale = 0.25f;
      const int64_t S = 80;
      const int64_t W = p.n_kv_head * p.head_dim;
      std::vector<Tensor> in = {random_f32(Shape{T, p.n_head * p.head_dim}, 15), random_f32(Shape{T, W}, 16),
                                random_f32(Shape{T, W}, 17), random_f32(Shape{S, W}, 18), random_f32(Shape{S, W}, 19)};
      for (bool position_input : {false, true}) {
        p.kv_offset = position_input ? 0 : offset;
        std::vector<Tensor> with = in;
        if (position_input) with.push_back(ids({static_cast<int32_t>(offset)}));
        auto [want, got] = run(Op::Attention, p, with, DType::F32, in[0].shape(), {3, 4});
        const std::string what = fmt::format("attention T {} offset {} position input {}", T, offset, position_input);
        expect_close(want, got, 2e-6, what);
        for (auto& [cpu_state, vk_state] : state_back_) expect_close(cpu_state, vk_state, 0.0, what + " cache");
      }
    }
  }
}

// f16, bf16 and q8_0 caches: the new rows rounded bit for bit as the CPU rounds them (f16/bf16 a
// word at a time, odd kv widths putting rows across word boundaries; q8_0 blocks of 34 bytes, the
// words two blocks share updated by both), the rows already there untouched, and the output as the
// CPU's over the same cache values.
TEST_P(VulkanOps, AttentionOverNarrowCaches) {
  struct Shape3 {
    int n_head, n_kv_head, head_dim;
  };
  for (DType dt : {DType::F16, DType::BF16, DType::Q8_0}) {
    for (const Shape3 h : {Shape3{4, 2, 16}, Shape3{8, 2, 64}, Shape3{3, 1, 17}, Shape3{6, 3, 32}}) {
      const int64_t W = static_cast<int64_t>(h.n_kv_head) * h.head_dim;
      if (W % dtype_traits(dt).block_size != 0) continue;
      for (int64_t T : {1, 5, 70}) {
        for (int64_t offset : {0, 3}) {
          AttentionParams p;
          p.n_head = h.n_head;
          p.n_kv_head = h.n_kv_head;
          p.head_dim = h.head_dim;
          p.scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
          const int64_t S = 80;
          std::vector<Tensor> in = {random_f32(Shape{T, p.n_head * p.head_dim}, 15), random_f32(Shape{T, W}, 16),
                                    random_f32(Shape{T, W}, 17), test::random_weight(dt, S, W, 18),
                                    test::random_weight(dt, S, W, 19)};
          for (bool position_input : {false, true}) {
            p.kv_offset = position_input ? 0 : offset;
            std::vector<Tensor> with = in;
            if (position_input) with.push_back(ids({static_cast<int32_t>(offset)}));
            auto [want, got] = run(Op::Attention, p, with, DType::F32, in[0].shape(), {3, 4});
            const std::string what =
                fmt::format("attention over a {} cache, {}/{} heads of {}, T {} offset {} position input {}",
                            dtype_name(dt), h.n_head, h.n_kv_head, h.head_dim, T, offset, position_input);
            expect_close(want, got, 2e-6, what);
            for (auto& [cpu_state, vk_state] : state_back_) expect_close(cpu_state, vk_state, 0.0, what + " cache");
          }
        }
      }
    }
  }
  EXPECT_TRUE(vulkan::supports(
      Op::Attention, std::vector<DType>{DType::F32, DType::F32, DType::F32, DType::Q8_0, DType::Q8_0, DType::I32}));
  EXPECT_FALSE(vulkan::supports(
      Op::Attention, std::vector<DType>{DType::F32, DType::F32, DType::F32, DType::F16, DType::BF16, DType::I32}));
  EXPECT_FALSE(vulkan::supports(Op::Attention,
                                std::vector<DType>{DType::F32, DType::F32, DType::F32, DType::Q4_0, DType::Q4_0}));
}

TEST_P(VulkanOps, SegmentAttentionAndPatchify) {
  struct Case {
    int n_head, n_kv_head, head_dim;
    std::vector<AttentionSegment> segments;
  };
  // Uneven segments: query and key counts that differ, are not multiples of the 8-row groups or
  // the 64-key tiles, a single query or key; MHA, GQA and MQA; head_dim up to 128.
  const Case cases[] = {
      {2, 1, 24, {{70, 70}, {70, 70}}},
      {4, 2, 72, {{5, 70}, {1, 3}, {13, 13}, {9, 129}}},
      {3, 1, 128, {{8, 40}, {17, 1}, {8, 65}}},
  };
  for (const Case& c : cases) {
    SegmentAttentionParams p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.head_dim;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    p.segments = c.segments;
    int64_t Tq = 0, Tk = 0;
    for (const AttentionSegment& s : c.segments) Tq += s.q_rows, Tk += s.k_rows;
    const int64_t width = static_cast<int64_t>(c.n_head) * c.head_dim;
    const int64_t kv_width = static_cast<int64_t>(c.n_kv_head) * c.head_dim;
    auto [want, got] = run(
        Op::SegmentAttention, p,
        {random_f32(Shape{Tq, width}, 20), random_f32(Shape{Tk, kv_width}, 21), random_f32(Shape{Tk, kv_width}, 22)},
        DType::F32, Shape{Tq, width});
    expect_close(want, got, 2e-6,
                 fmt::format("segment attention {}/{} heads of {}, {} segments", c.n_head, c.n_kv_head, c.head_dim,
                             c.segments.size()));
  }
  for (bool channels_last : {false, true}) {
    const Shape image = channels_last ? Shape{2, 6, 9, 3} : Shape{2, 3, 6, 9};
    auto [w2, g2] =
        run(Op::Patchify, PatchParams{3, channels_last}, {random_f32(image, 23)}, DType::F32, Shape{12, 27});
    expect_close(w2, g2, 0.0, "patchify");
  }
}

// Lowering needs no device: one dispatch per segment, with its rows in the push constants; the
// contract checked before anything is recorded.
TEST(VulkanLowering, SegmentAttentionIsOneDispatchPerSegmentAndChecksTheSegments) {
  Node node;
  node.op = Op::SegmentAttention;
  Tensor q = Tensor::host(DType::F32, Shape{12, 2 * 16}, "q");
  Tensor k = Tensor::host(DType::F32, Shape{30, 16}, "k");
  Tensor out = Tensor::host(DType::F32, q.shape(), "out");
  BoundOp op;
  op.node = &node;
  op.inputs = {&q, &k, &k};
  op.output = &out;
  const auto lower_with = [&](std::vector<AttentionSegment> segments, int head_dim = 16) {
    node.params = SegmentAttentionParams{2, 1, head_dim, 0.25f, std::move(segments)};
    return vulkan::lower(op);
  };
  const std::vector<vulkan::Step> steps = lower_with({{9, 20}, {3, 10}});
  ASSERT_EQ(steps.size(), 2u);
  const auto& second = std::get<vulkan::Dispatch>(steps[1]);
  EXPECT_EQ(second.shader, "segment_attention");
  EXPECT_EQ(second.params[0], 3u);   // query rows
  EXPECT_EQ(second.params[5], 9u);   // first query row
  EXPECT_EQ(second.params[6], 20u);  // first key row
  EXPECT_EQ(second.params[7], 10u);  // key rows
  EXPECT_EQ(second.groups, 2u);      // one group of 8 rows per head
  EXPECT_EQ(std::get<vulkan::Dispatch>(steps[0]).groups, 4u);
  EXPECT_THROW(lower_with({}), Error);
  EXPECT_THROW(lower_with({{9, 20}, {0, 0}, {3, 10}}), Error);
  EXPECT_THROW(lower_with({{9, 20}, {3, 9}}), Error);   // a key row left over
  EXPECT_THROW(lower_with({{9, 20}, {4, 10}}), Error);  // past q's rows
  EXPECT_TRUE(vulkan::supports(Op::SegmentAttention, std::vector<DType>{DType::F32, DType::F32, DType::F32}));
  EXPECT_FALSE(vulkan::supports(Op::SegmentAttention, std::vector<DType>{DType::F32, DType::F16, DType::F32}));
}

TEST_P(VulkanOps, LayoutOpsOnAnyDtype) {
  const Tensor a = random_f32(Shape{3, 5, 7}, 24), b = random_f32(Shape{3, 2, 7}, 25);
  {
    auto [want, got] = run(Op::Concat, AxisParams{1, 0, 0}, {a, b}, DType::F32, Shape{3, 7, 7});
    expect_close(want, got, 0.0, "concat");
  }
  {
    auto [want, got] = run(Op::Slice, AxisParams{1, 1, 3}, {a}, DType::F32, Shape{3, 3, 7});
    expect_close(want, got, 0.0, "slice");
  }
  const Tensor q = test::random_weight(DType::Q8_0, 3, 64, 26);
  {
    auto [want, got] = run(Op::Copy, std::monostate{}, {q}, DType::Q8_0, q.shape());
    expect_close(want, got, 0.0, "copy q8_0");
  }
  {
    auto [want, got] = run(Op::Reshape, std::monostate{}, {q}, DType::Q8_0, Shape{6, 32});
    expect_close(want, got, 0.0, "reshape q8_0");
  }
  {
    auto [want, got] = run(Op::Slice, AxisParams{1, 32, 32}, {q}, DType::Q8_0, Shape{3, 32});
    expect_close(want, got, 0.0, "slice q8_0 (34-byte blocks)");
  }
}

INSTANTIATE_TEST_SUITE_P(MappedAndStaged, VulkanOps, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "Mapped" : "Staged"; });

// The validation run is worth something only if the layer is on and what it reports fails a test:
// an invalid call (a buffer with no usage flags, VUID-VkBufferCreateInfo-usage-requiredbitmask)
// must reach the count TearDown checks.
class VulkanValidation : public ferry::testing::VulkanTest<::testing::Test> {};

TEST_F(VulkanValidation, TheLayerIsOnAndItsMessagesAreCounted) {
  if (no_device()) return;
  const char* flag = std::getenv("FERRY_VULKAN_VALIDATION");
  if (flag == nullptr || std::string(flag) != "1") GTEST_SKIP() << "runs in the vulkan_validation CTest run";
  ASSERT_TRUE(vulkan::Instance::get()->validation());
  vulkan::VulkanDevice device(DeviceId::parse("vulkan:0"), Allocator::kUnlimited);
  const uint64_t before = vulkan::validation_messages();
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = 256;
  info.usage = 0;  // invalid: at least one usage bit is required
  VkBuffer buffer = VK_NULL_HANDLE;
  if (vulkan::vkCreateBuffer(device.handle(), &info, nullptr, &buffer) == VK_SUCCESS) {
    vulkan::vkDestroyBuffer(device.handle(), buffer, nullptr);
  }
  EXPECT_GT(vulkan::validation_messages(), before);
  accept_validation_messages();
}

}  // namespace
}  // namespace ferry

#endif  // FERRY_HAVE_VULKAN
