// The vision tower's kernels against naive references: a stride-p convolution computed directly
// equals patchify + matmul (both layouts), reshape keeps the bytes, block attention equals a
// softmax computed in double per block and never reads across blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "core/error.h"

namespace ferry {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

Tensor host_f32(const Shape& shape, const std::vector<float>& values, const std::string& name) {
  Tensor t = Tensor::host(DType::F32, shape, name);
  std::copy(values.begin(), values.end(), t.data_as<float>());
  return t;
}

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.shape().numel());
}

// conv2d with kernel = stride = P, no padding, written out: out[b, o, gy, gx].
std::vector<double> naive_conv(const std::vector<float>& img, int64_t B, int64_t C, int64_t H, int64_t W,
                               const std::vector<float>& w, const std::vector<float>& bias, int64_t O, int64_t P) {
  const int64_t gh = H / P, gw = W / P;
  std::vector<double> out(static_cast<size_t>(B * O * gh * gw));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t gy = 0; gy < gh; ++gy)
        for (int64_t gx = 0; gx < gw; ++gx) {
          double s = bias[static_cast<size_t>(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t ky = 0; ky < P; ++ky)
              for (int64_t kx = 0; kx < P; ++kx)
                s += static_cast<double>(img[static_cast<size_t>(((b * C + c) * H + gy * P + ky) * W + gx * P + kx)]) *
                     w[static_cast<size_t>(((o * C + c) * P + ky) * P + kx)];
          out[static_cast<size_t>(((b * O + o) * gh + gy) * gw + gx)] = s;
        }
  return out;
}

TEST(Patchify, ThenMatMulIsTheStridedConvolutionInBothLayouts) {
  ThreadPool pool(2);
  const int64_t B = 2, C = 3, H = 6, W = 9, P = 3, O = 5;
  const int64_t gh = H / P, gw = W / P;
  const auto img = random_values(static_cast<size_t>(B * C * H * W), 1);
  const auto wv = random_values(static_cast<size_t>(O * C * P * P), 2);
  const auto bv = random_values(static_cast<size_t>(O), 3);
  const auto want = naive_conv(img, B, C, H, W, wv, bv, O, P);

  // The same image channels-last: [B, H, W, C].
  std::vector<float> nhwc(img.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          nhwc[static_cast<size_t>(((b * H + y) * W + x) * C + c)] =
              img[static_cast<size_t>(((b * C + c) * H + y) * W + x)];

  Tensor w4 = host_f32(Shape{O, C, P, P}, wv, "w");
  Tensor w2 = Tensor::host(DType::F32, Shape{O, C * P * P}, "w2");
  kernels::reshape(w4, w2, pool);
  Tensor bias = host_f32(Shape{O}, bv, "bias");
  for (bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels last" : "channels first");
    Tensor x = channels_last ? host_f32(Shape{B, H, W, C}, nhwc, "img") : host_f32(Shape{B, C, H, W}, img, "img");
    Tensor patches = Tensor::host(DType::F32, Shape{B * gh * gw, C * P * P}, "patches");
    kernels::patchify(x, PatchParams{static_cast<int>(P), channels_last}, patches, pool);
    Tensor y = Tensor::host(DType::F32, Shape{B * gh * gw, O}, "y");
    kernels::matmul(patches, w2, &bias, y, pool);
    // Row (b, gy, gx), column o  <->  conv out[b, o, gy, gx].
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < gh * gw; ++g)
        for (int64_t o = 0; o < O; ++o)
          EXPECT_NEAR(y.data_as<float>()[(b * gh * gw + g) * O + o],
                      want[static_cast<size_t>((b * O + o) * gh * gw + g)], 1e-5);
  }
}

TEST(Patchify, RejectsPartialPatchesAndWrongOutputs) {
  ThreadPool pool(1);
  Tensor x = host_f32(Shape{1, 3, 5, 6}, random_values(90, 4), "img");
  Tensor out = Tensor::host(DType::F32, Shape{2, 27}, "out");
  EXPECT_THROW(kernels::patchify(x, PatchParams{3, false}, out, pool), Error);
  Tensor x2 = host_f32(Shape{1, 3, 6, 6}, random_values(108, 4), "img");
  Tensor wrong = Tensor::host(DType::F32, Shape{3, 27}, "out");
  EXPECT_THROW(kernels::patchify(x2, PatchParams{3, false}, wrong, pool), Error);
}

TEST(Reshape, KeepsTheBytesAndRefusesAnotherSize) {
  ThreadPool pool(2);
  const auto v = random_values(24, 5);
  Tensor x = host_f32(Shape{2, 3, 4}, v, "x");
  Tensor y = Tensor::host(DType::F32, Shape{6, 4}, "y");
  kernels::reshape(x, y, pool);
  EXPECT_EQ(values_of(y), v);
  Tensor bad = Tensor::host(DType::F32, Shape{5, 4}, "bad");
  EXPECT_THROW(kernels::reshape(x, bad, pool), Error);
  Tensor other = Tensor::host(DType::F16, Shape{6, 4}, "f16");
  EXPECT_THROW(kernels::reshape(x, other, pool), Error);
}

// softmax(q k^T * scale) v per block and head, in double.
std::vector<double> naive_block_attention(const std::vector<float>& q, const std::vector<float>& k,
                                          const std::vector<float>& v, int64_t T, const BlockAttentionParams& p) {
  const int64_t hd = p.head_dim, kvw = p.n_kv_head * hd, qw = p.n_head * hd;
  std::vector<double> out(static_cast<size_t>(T * qw));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t first = t / p.block * p.block;
    for (int64_t h = 0; h < p.n_head; ++h) {
      const int64_t kh = h / (p.n_head / p.n_kv_head);
      std::vector<double> s(static_cast<size_t>(p.block));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < p.block; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d += static_cast<double>(q[static_cast<size_t>(t * qw + h * hd + i)]) *
               k[static_cast<size_t>((first + j) * kvw + kh * hd + i)];
        s[static_cast<size_t>(j)] = d * p.scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < p.block; ++j)
          acc += s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((first + j) * kvw + kh * hd + i)];
        out[static_cast<size_t>(t * qw + h * hd + i)] = acc;
      }
    }
  }
  return out;
}

TEST(BlockAttention, MatchesNaiveSoftmaxPerBlockForHeadDim112AndGqa) {
  ThreadPool pool(2);
  for (const auto& [n_head, n_kv] : std::vector<std::pair<int, int>>{{2, 2}, {4, 2}}) {
    BlockAttentionParams p;
    p.n_head = n_head;
    p.n_kv_head = n_kv;
    p.head_dim = 112;
    p.scale = 1.0f / std::sqrt(112.0f);
    p.block = 7;
    const int64_t T = 3 * p.block;
    const auto qv = random_values(static_cast<size_t>(T * n_head * 112), 6);
    const auto kv = random_values(static_cast<size_t>(T * n_kv * 112), 7);
    const auto vv = random_values(static_cast<size_t>(T * n_kv * 112), 8);
    Tensor q = host_f32(Shape{T, n_head * 112}, qv, "q");
    Tensor k = host_f32(Shape{T, n_kv * 112}, kv, "k");
    Tensor v = host_f32(Shape{T, n_kv * 112}, vv, "v");
    Tensor out = Tensor::host(DType::F32, q.shape(), "out");
    kernels::block_attention(q, k, v, p, out, pool);
    const auto want = naive_block_attention(qv, kv, vv, T, p);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out.data_as<float>()[i], want[i], 2e-6) << i;
  }
}

TEST(BlockAttention, ABlockNeverSeesAnotherBlocksRows) {
  ThreadPool pool(2);
  BlockAttentionParams p{2, 1, 8, 0.35f, 4};
  const int64_t T = 8;
  const auto qv = random_values(static_cast<size_t>(T * 16), 9);
  auto kv = random_values(static_cast<size_t>(T * 8), 10);
  auto vv = random_values(static_cast<size_t>(T * 8), 11);
  const auto run = [&](const std::vector<float>& kk, const std::vector<float>& vvv) {
    Tensor q = host_f32(Shape{T, 16}, qv, "q");
    Tensor k = host_f32(Shape{T, 8}, kk, "k");
    Tensor v = host_f32(Shape{T, 8}, vvv, "v");
    Tensor out = Tensor::host(DType::F32, q.shape(), "out");
    kernels::block_attention(q, k, v, p, out, pool);
    return values_of(out);
  };
  const auto before = run(kv, vv);
  for (size_t i = 4 * 8; i < kv.size(); ++i) kv[i] += 3.0f, vv[i] -= 2.0f;  // change block 1 only
  const auto after = run(kv, vv);
  for (size_t i = 0; i < 4 * 16; ++i) EXPECT_EQ(before[i], after[i]) << i;
  bool changed = false;
  for (size_t i = 4 * 16; i < before.size(); ++i) changed = changed || before[i] != after[i];
  EXPECT_TRUE(changed);
}

TEST(BlockAttention, RejectsRowsThatAreNotWholeBlocks) {
  ThreadPool pool(1);
  BlockAttentionParams p{1, 1, 4, 0.5f, 3};
  Tensor q = host_f32(Shape{4, 4}, random_values(16, 1), "q");
  Tensor out = Tensor::host(DType::F32, q.shape(), "out");
  EXPECT_THROW(kernels::block_attention(q, q, q, p, out, pool), Error);
}

TEST(VisionOps, ComputeDispatchesAndSupportsThem) {
  EXPECT_TRUE(kernels::supports(Op::Reshape, {DType::BF16}));
  EXPECT_TRUE(kernels::supports(Op::Patchify, {DType::F32}));
  EXPECT_FALSE(kernels::supports(Op::Patchify, {DType::F16}));
  EXPECT_TRUE(kernels::supports(Op::BlockAttention, {DType::F32, DType::F32, DType::F32}));
  ThreadPool pool(1);
  Tensor x = host_f32(Shape{1, 1, 2, 2}, {1, 2, 3, 4}, "x");
  Tensor out = Tensor::host(DType::F32, Shape{1, 4}, "out");
  Tensor in = x;
  kernels::compute(Op::Patchify, PatchParams{2, false}, {&in}, out, pool);
  EXPECT_EQ(values_of(out), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(op_name(Op::BlockAttention), "block_attention");
}

}  // namespace
}  // namespace ferry
