// The vision tower's kernels against naive references: a stride-p convolution computed directly
// equals patchify + matmul (both layouts), reshape keeps the bytes, segment attention equals a
// softmax computed in double per segment and never reads across segments.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "core/error.h"
#include "reference.h"

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

// softmax(q k^T * scale) v per segment and head, in double, with a tolerance per output: f32
// rounding moves each score by ~eps * sum|q_d k_d| * scale, each softmax weight by that much
// relative, and so the output (a convex mix of |v| <= 1) by a few times that.
struct Reference {
  std::vector<double> out;
  std::vector<double> tol;
};
Reference naive_segment_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                  const SegmentAttentionParams& p) {
  const int64_t hd = p.head_dim, kvw = p.n_kv_head * hd, qw = p.n_head * hd;
  int64_t Tq = 0;
  for (const AttentionSegment& s : p.segments) Tq += s.q_rows;
  Reference r{std::vector<double>(static_cast<size_t>(Tq * qw)), std::vector<double>(static_cast<size_t>(Tq * qw))};
  int64_t q0 = 0, k0 = 0;
  for (const AttentionSegment& seg : p.segments) {
    for (int64_t t = q0; t < q0 + seg.q_rows; ++t) {
      for (int64_t h = 0; h < p.n_head; ++h) {
        const int64_t kh = h / (p.n_head / p.n_kv_head);
        std::vector<double> s(static_cast<size_t>(seg.k_rows));
        double mx = -1e300, sum = 0, terms = 0;
        for (int64_t j = 0; j < seg.k_rows; ++j) {
          double d = 0, abs_terms = 0;
          for (int64_t i = 0; i < hd; ++i) {
            const double prod = static_cast<double>(q[static_cast<size_t>(t * qw + h * hd + i)]) *
                                k[static_cast<size_t>((k0 + j) * kvw + kh * hd + i)];
            d += prod;
            abs_terms += std::fabs(prod);
          }
          s[static_cast<size_t>(j)] = d * p.scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
          terms = std::max(terms, abs_terms * std::fabs(p.scale));
        }
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < seg.k_rows; ++j)
            acc += s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((k0 + j) * kvw + kh * hd + i)];
          r.out[static_cast<size_t>(t * qw + h * hd + i)] = acc;
          r.tol[static_cast<size_t>(t * qw + h * hd + i)] = 2e-6 * (1.0 + terms);
        }
      }
    }
    q0 += seg.q_rows;
    k0 += seg.k_rows;
  }
  return r;
}

struct SegmentCase {
  int n_head, n_kv_head, head_dim;
  std::vector<AttentionSegment> segments;
};

SegmentAttentionParams params_for(const SegmentCase& c) {
  SegmentAttentionParams p;
  p.n_head = c.n_head;
  p.n_kv_head = c.n_kv_head;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.segments = c.segments;
  return p;
}

// Runs the kernel on random q, k, v for case c; the output, and the inputs through the pointers.
std::vector<float> run_segment_attention(const SegmentAttentionParams& p, ThreadPool& pool, uint32_t seed,
                                         std::vector<float>* q_out = nullptr, std::vector<float>* k_out = nullptr,
                                         std::vector<float>* v_out = nullptr) {
  int64_t Tq = 0, Tk = 0;
  for (const AttentionSegment& s : p.segments) Tq += s.q_rows, Tk += s.k_rows;
  const int64_t qw = static_cast<int64_t>(p.n_head) * p.head_dim, kvw = static_cast<int64_t>(p.n_kv_head) * p.head_dim;
  const auto qv = random_values(static_cast<size_t>(Tq * qw), seed);
  const auto kv = random_values(static_cast<size_t>(Tk * kvw), seed + 1);
  const auto vv = random_values(static_cast<size_t>(Tk * kvw), seed + 2);
  Tensor q = host_f32(Shape{Tq, qw}, qv, "q");
  Tensor k = host_f32(Shape{Tk, kvw}, kv, "k");
  Tensor v = host_f32(Shape{Tk, kvw}, vv, "v");
  Tensor out = Tensor::host(DType::F32, q.shape(), "out");
  kernels::segment_attention(q, k, v, p, out, pool);
  if (q_out) *q_out = qv;
  if (k_out) *k_out = kv;
  if (v_out) *v_out = vv;
  return values_of(out);
}

// Unequal query and key lengths, segments of different sizes (more keys than one tile of 64, fewer
// queries than one tile of 4), MHA, GQA and MQA (6 heads on one kv head: tiles cross query rows),
// head_dim 72, 112 and 128, at every SIMD level.
TEST(SegmentAttention, MatchesNaiveSoftmaxPerSegmentAcrossShapesAndLevels) {
  test::SimdLevelGuard guard;
  const SegmentCase cases[] = {
      {2, 2, 72, {{5, 70}, {1, 3}, {13, 13}, {64, 129}}},
      {4, 2, 112, {{7, 7}, {3, 66}, {9, 1}}},
      {6, 1, 128, {{64, 100}, {2, 5}}},
      {3, 3, 128, {{6, 64}, {11, 65}}},
  };
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (const SegmentCase& c : cases) {
        const SegmentAttentionParams p = params_for(c);
        std::vector<float> qv, kv, vv;
        const auto got = run_segment_attention(p, pool, 6, &qv, &kv, &vv);
        const Reference want = naive_segment_attention(qv, kv, vv, p);
        ASSERT_EQ(got.size(), want.out.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want.out[i], want.tol[i])
              << level << " threads " << threads << " heads " << c.n_head << "/" << c.n_kv_head << " hd " << c.head_dim
              << " element " << i;
        }
      }
    }
  }
}

TEST(SegmentAttention, ResultDoesNotDependOnThreads) {
  test::SimdLevelGuard guard;
  const SegmentAttentionParams p = params_for({8, 2, 72, {{9, 40}, {17, 17}, {3, 130}}});
  for (const std::string& level : kernels::available_simd_levels()) {
    kernels::set_simd_level(level);
    std::vector<std::vector<float>> outputs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      outputs.push_back(run_segment_attention(p, pool, 12));
    }
    EXPECT_EQ(outputs[0], outputs[1]) << level;
    EXPECT_EQ(outputs[0], outputs[2]) << level;
  }
}

// Changing one segment's keys and values changes that segment's outputs and no other's.
TEST(SegmentAttention, ASegmentNeverSeesAnotherSegmentsRows) {
  ThreadPool pool(2);
  const SegmentAttentionParams p = params_for({2, 1, 8, {{3, 5}, {4, 2}, {2, 70}}});
  const int64_t qw = 16, kvw = 8, Tq = 9, Tk = 77;
  const auto qv = random_values(static_cast<size_t>(Tq * qw), 9);
  const auto kv = random_values(static_cast<size_t>(Tk * kvw), 10);
  const auto vv = random_values(static_cast<size_t>(Tk * kvw), 11);
  const auto run = [&](const std::vector<float>& kk, const std::vector<float>& vvv) {
    Tensor q = host_f32(Shape{Tq, qw}, qv, "q");
    Tensor k = host_f32(Shape{Tk, kvw}, kk, "k");
    Tensor v = host_f32(Shape{Tk, kvw}, vvv, "v");
    Tensor out = Tensor::host(DType::F32, q.shape(), "out");
    kernels::segment_attention(q, k, v, p, out, pool);
    return values_of(out);
  };
  const auto before = run(kv, vv);
  int64_t q0 = 0, k0 = 0;
  for (size_t changed = 0; changed < p.segments.size(); ++changed) {
    const AttentionSegment& seg = p.segments[changed];
    auto k2 = kv, v2 = vv;
    for (int64_t i = k0 * kvw; i < (k0 + seg.k_rows) * kvw; ++i) {
      k2[static_cast<size_t>(i)] += 3.0f;
      v2[static_cast<size_t>(i)] -= 2.0f;
    }
    const auto after = run(k2, v2);
    bool moved = false;
    for (int64_t i = 0; i < Tq * qw; ++i) {
      const bool inside = i >= q0 * qw && i < (q0 + seg.q_rows) * qw;
      if (inside) {
        moved = moved || before[static_cast<size_t>(i)] != after[static_cast<size_t>(i)];
      } else {
        EXPECT_EQ(before[static_cast<size_t>(i)], after[static_cast<size_t>(i)]) << "segment " << changed << " " << i;
      }
    }
    EXPECT_TRUE(moved) << "segment " << changed;
    q0 += seg.q_rows;
    k0 += seg.k_rows;
  }
}

TEST(SegmentAttention, RejectsEmptySegmentsAndRowsTheSegmentsDoNotCover) {
  ThreadPool pool(1);
  Tensor q = host_f32(Shape{4, 8}, random_values(32, 1), "q");
  Tensor k = host_f32(Shape{6, 4}, random_values(24, 2), "k");
  Tensor out = Tensor::host(DType::F32, q.shape(), "out");
  const auto with = [](std::vector<AttentionSegment> segments, int n_head = 2, int n_kv_head = 1) {
    SegmentAttentionParams p;
    p.n_head = n_head;
    p.n_kv_head = n_kv_head;
    p.head_dim = 4;
    p.scale = 0.5f;
    p.segments = std::move(segments);
    return p;
  };
  // The right segments run.
  kernels::segment_attention(q, k, k, with({{1, 2}, {3, 4}}), out, pool);
  const auto rejects = [&](const SegmentAttentionParams& p, ErrorKind kind, const char* needle) {
    test::expect_error(kind, [&] { kernels::segment_attention(q, k, k, p, out, pool); }, {"segment_attention", needle});
  };
  rejects(with({}), ErrorKind::Usage, "no segments");
  rejects(with({{1, 2}, {0, 0}, {3, 4}}), ErrorKind::Usage, "none may be empty");
  rejects(with({{0, 2}, {4, 4}}), ErrorKind::Usage, "none may be empty");
  rejects(with({{1, 6}, {3, 0}}), ErrorKind::Usage, "none may be empty");
  rejects(with({{1, 2}, {2, 4}}), ErrorKind::Shape, "cover 3 query and 6 key rows");  // q rows short
  rejects(with({{1, 2}, {3, 3}}), ErrorKind::Shape, "cover 4 query and 5 key rows");  // k rows short
  rejects(with({{2, 2}, {3, 4}}), ErrorKind::Shape, "ends past");                     // q rows over
  rejects(with({{1, 2}, {3, 5}}), ErrorKind::Shape, "ends past");                     // k rows over
  rejects(with({{1, 2}, {3, 4}}, 3, 2), ErrorKind::Usage, "multiple of kv heads");
  rejects(with({{1, 2}, {3, 4}}, 2, 2), ErrorKind::Shape, "key");  // k is not [Tk, 2 * 4]
  Tensor v_short = host_f32(Shape{5, 4}, random_values(20, 3), "v");
  test::expect_error(ErrorKind::Shape,
                     [&] {
                       kernels::segment_attention(q, k, v_short, with({{1, 2}, {3, 4}}), out, pool);
                     },
                     {"segment_attention", "value v"});
  Tensor k16 = Tensor::host(DType::F16, Shape{6, 4}, "k16");
  test::expect_error(ErrorKind::Shape,
                     [&] {
                       kernels::segment_attention(q, k16, k, with({{1, 2}, {3, 4}}), out, pool);
                     },
                     {"segment_attention", "f32"});
}

TEST(VisionOps, ComputeDispatchesAndSupportsThem) {
  EXPECT_TRUE(kernels::supports(Op::Reshape, {DType::BF16}));
  EXPECT_TRUE(kernels::supports(Op::Patchify, {DType::F32}));
  EXPECT_FALSE(kernels::supports(Op::Patchify, {DType::F16}));
  EXPECT_TRUE(kernels::supports(Op::SegmentAttention, {DType::F32, DType::F32, DType::F32}));
  EXPECT_FALSE(kernels::supports(Op::SegmentAttention, {DType::F32, DType::F16, DType::F32}));
  ThreadPool pool(1);
  Tensor x = host_f32(Shape{1, 1, 2, 2}, {1, 2, 3, 4}, "x");
  Tensor out = Tensor::host(DType::F32, Shape{1, 4}, "out");
  Tensor in = x;
  kernels::compute(Op::Patchify, PatchParams{2, false}, {&in}, out, pool);
  EXPECT_EQ(values_of(out), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(op_name(Op::SegmentAttention), "segment_attention");
  // Through compute: two segments of one query each, on one key and on two identical keys.
  Tensor q = host_f32(Shape{2, 2}, {1, 0, 0, 1}, "q");
  Tensor k = host_f32(Shape{3, 2}, {1, 0, 0.5f, 0.5f, 0.5f, 0.5f}, "k");
  Tensor v = host_f32(Shape{3, 2}, {1, 2, 3, 4, 3, 4}, "v");
  Tensor att = Tensor::host(DType::F32, Shape{2, 2}, "att");
  SegmentAttentionParams p{1, 1, 2, 1.0f, {{1, 1}, {1, 2}}};
  kernels::compute(Op::SegmentAttention, p, {&q, &k, &v}, att, pool);
  EXPECT_EQ(values_of(att), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace ferry
