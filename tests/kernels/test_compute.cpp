// compute() dispatches every op to its kernel with the documented input order; supports() answers
// the scheduler's question per op and dtypes.
#include <gtest/gtest.h>

#include "backends/cpu/kernels/kernels.h"
#include "reference.h"

using namespace ferry;
using namespace ferry::test;

namespace {

Tensor random_f32(const Shape& shape, uint32_t seed, const std::string& name) {
  return f32_tensor(shape, random_floats(static_cast<size_t>(shape.numel()), seed), name);
}

Tensor empty_like(const Tensor& t) {
  return Tensor::host(t.dtype(), t.shape(), "out");
}

}  // namespace

TEST(Compute, EveryOpDispatchesToItsKernel) {
  ThreadPool pool(2);
  const int64_t T = 3, H = 64;
  Tensor x = random_f32(Shape{T, H}, 1, "x");
  Tensor x2 = random_f32(Shape{T, H}, 2, "x2");
  Tensor w = random_f32(Shape{H}, 3, "w");
  Tensor b = random_f32(Shape{H}, 4, "b");
  Tensor wm = random_weight(DType::Q8_0, 16, H, 5);
  Tensor bias = random_f32(Shape{16}, 6, "bias");
  Tensor ids = i32_tensor({1, 0, 15});
  Tensor pos = i32_tensor({4, 5, 6}, "pos");

  const auto expect_same = [&](Op op, const OpParams& params, std::vector<Tensor*> inputs, const Shape& out_shape,
                               const std::function<void(Tensor&)>& direct) {
    Tensor via_compute = Tensor::host(DType::F32, out_shape, "a");
    Tensor via_kernel = Tensor::host(DType::F32, out_shape, "b");
    kernels::compute(op, params, inputs, via_compute, pool);
    direct(via_kernel);
    EXPECT_EQ(values_of(via_compute), values_of(via_kernel)) << op_name(op) << " with " << inputs.size() << " inputs";
  };
  expect_same(Op::Embedding, {}, {&wm, &ids}, Shape{T, H}, [&](Tensor& o) { kernels::embedding(wm, ids, o, pool); });
  expect_same(Op::MatMul, {}, {&x, &wm}, Shape{T, 16}, [&](Tensor& o) { kernels::matmul(x, wm, nullptr, o, pool); });
  expect_same(Op::MatMul, {}, {&x, &wm, &bias}, Shape{T, 16},
              [&](Tensor& o) { kernels::matmul(x, wm, &bias, o, pool); });
  expect_same(Op::Add, {}, {&x, &x2}, x.shape(), [&](Tensor& o) { kernels::add(x, x2, o, pool); });
  expect_same(Op::Mul, {}, {&x, &x2}, x.shape(), [&](Tensor& o) { kernels::mul(x, x2, o, pool); });
  expect_same(Op::Scale, ScaleParams{0.5f}, {&x}, x.shape(), [&](Tensor& o) { kernels::scale(x, 0.5f, o, pool); });
  expect_same(Op::RmsNorm, NormParams{1e-6f}, {&x, &w}, x.shape(),
              [&](Tensor& o) { kernels::rms_norm(x, w, 1e-6f, o, pool); });
  expect_same(Op::LayerNorm, NormParams{1e-5f}, {&x, &w}, x.shape(),
              [&](Tensor& o) { kernels::layer_norm(x, w, nullptr, 1e-5f, o, pool); });
  expect_same(Op::LayerNorm, NormParams{1e-5f}, {&x, &w, &b}, x.shape(),
              [&](Tensor& o) { kernels::layer_norm(x, w, &b, 1e-5f, o, pool); });
  const RopeParams rp{16, 8, RopeStyle::Adjacent, 10000.0f, 1.0f};
  expect_same(Op::Rope, rp, {&x, &pos}, x.shape(), [&](Tensor& o) { kernels::rope(x, pos, rp, o, pool); });
  expect_same(Op::Silu, {}, {&x}, x.shape(), [&](Tensor& o) { kernels::silu(x, o, pool); });
  expect_same(Op::Gelu, {}, {&x}, x.shape(), [&](Tensor& o) { kernels::gelu(x, o, pool); });
  expect_same(Op::GeluTanh, {}, {&x}, x.shape(), [&](Tensor& o) { kernels::gelu_tanh(x, o, pool); });
  expect_same(Op::SwiGlu, {}, {&x}, Shape{T, H / 2}, [&](Tensor& o) { kernels::swiglu_fused(x, o, pool); });
  expect_same(Op::SwiGlu, {}, {&x, &x2}, x.shape(), [&](Tensor& o) { kernels::swiglu(x, x2, o, pool); });
  expect_same(Op::Softmax, {}, {&x}, x.shape(), [&](Tensor& o) { kernels::softmax(x, o, pool); });
  expect_same(Op::Concat, AxisParams{1, 0, 0}, {&x, &x2}, Shape{T, 2 * H}, [&](Tensor& o) {
    kernels::concat({&x, &x2}, 1, o, pool);
  });
  expect_same(Op::Slice, AxisParams{1, 8, 16}, {&x}, Shape{T, 16},
              [&](Tensor& o) { kernels::slice(x, 1, 8, 16, o, pool); });
  expect_same(Op::Copy, {}, {&x}, x.shape(), [&](Tensor& o) { kernels::copy(x, o, pool); });

  // Attention writes the caches given as inputs 3 and 4: run it twice on separate caches.
  const AttentionParams ap{4, 2, 16, 0.25f, 2};
  Tensor k = random_f32(Shape{T, 32}, 7, "k");
  Tensor v = random_f32(Shape{T, 32}, 8, "v");
  Tensor kc1 = random_f32(Shape{8, 32}, 9, "kc"), vc1 = random_f32(Shape{8, 32}, 10, "vc");
  Tensor kc2 = random_f32(Shape{8, 32}, 9, "kc"), vc2 = random_f32(Shape{8, 32}, 10, "vc");
  expect_same(Op::Attention, ap, {&x, &k, &v, &kc1, &vc1}, x.shape(),
              [&](Tensor& o) { kernels::attention(x, k, v, kc2, vc2, ap, o, pool); });
  EXPECT_EQ(values_of(kc1), values_of(kc2));
  EXPECT_EQ(values_of(vc1), values_of(vc2));
}

TEST(Compute, RejectsWrongInputCountsAndParams) {
  ThreadPool pool(1);
  Tensor x = random_f32(Shape{2, 8}, 1, "x");
  Tensor out = empty_like(x);
  expect_error(ErrorKind::Usage, [&] { kernels::compute(Op::Add, {}, {&x}, out, pool); }, {"add", "1 inputs"});
  expect_error(ErrorKind::Usage, [&] { kernels::compute(Op::MatMul, {}, {&x, &x, &x, &x}, out, pool); }, {"matmul"});
  expect_error(ErrorKind::Usage, [&] { kernels::compute(Op::SwiGlu, {}, {&x, &x, &x}, out, pool); }, {"swiglu"});
  expect_error(ErrorKind::Usage, [&] { kernels::compute(Op::Scale, NormParams{}, {&x}, out, pool); }, {"scale"});
  expect_error(ErrorKind::Usage, [&] { kernels::compute(Op::Silu, {}, {nullptr}, out, pool); }, {"null"});
}

TEST(Compute, SupportsAnswersPerOpAndDtypes) {
  using D = DType;
  for (D w : {D::F32, D::F16, D::BF16, D::Q8_0, D::Q4_0}) {
    EXPECT_TRUE(kernels::supports(Op::MatMul, {D::F32, w}));
    EXPECT_TRUE(kernels::supports(Op::MatMul, {D::F32, w, D::F32}));
    EXPECT_TRUE(kernels::supports(Op::Embedding, {w, D::I32}));
  }
  EXPECT_FALSE(kernels::supports(Op::MatMul, {D::F16, D::F32}));
  EXPECT_FALSE(kernels::supports(Op::MatMul, {D::F32, D::I32}));
  EXPECT_FALSE(kernels::supports(Op::MatMul, {D::F32}));
  EXPECT_FALSE(kernels::supports(Op::Embedding, {D::F32, D::F32}));
  EXPECT_TRUE(kernels::supports(Op::Attention, {D::F32, D::F32, D::F32, D::F32, D::F32}));
  // Caches of any KV-cache dtype, both the same; q, k and v f32.
  for (D kv : {D::F16, D::BF16, D::Q8_0}) {
    EXPECT_TRUE(kernels::supports(Op::Attention, {D::F32, D::F32, D::F32, kv, kv}));
  }
  EXPECT_FALSE(kernels::supports(Op::Attention, {D::F32, D::F32, D::F32, D::F16, D::Q8_0}));
  EXPECT_FALSE(kernels::supports(Op::Attention, {D::F32, D::F32, D::F32, D::Q4_0, D::Q4_0}));
  EXPECT_FALSE(kernels::supports(Op::Attention, {D::F32, D::F16, D::F32, D::F16, D::F16}));
  EXPECT_TRUE(kernels::supports(Op::Attention, {D::F32, D::F32, D::F32, D::Q8_0, D::Q8_0, D::I32}));
  EXPECT_TRUE(kernels::supports(Op::SwiGlu, {D::F32}));
  EXPECT_TRUE(kernels::supports(Op::SwiGlu, {D::F32, D::F32}));
  EXPECT_TRUE(kernels::supports(Op::LayerNorm, {D::F32, D::BF16, D::BF16}));
  EXPECT_TRUE(kernels::supports(Op::Rope, {D::F32, D::I32}));
  EXPECT_FALSE(kernels::supports(Op::Rope, {D::F32, D::F32}));
  EXPECT_TRUE(kernels::supports(Op::Concat, {D::Q8_0, D::Q8_0}));
  EXPECT_FALSE(kernels::supports(Op::Concat, {D::Q8_0, D::F32}));
  EXPECT_TRUE(kernels::supports(Op::Copy, {D::BF16}));
  EXPECT_FALSE(kernels::supports(Op::Add, {D::F32, D::F16}));
  // Every op has some dtype combination the CPU backend runs.
  for (int i = 0; i < static_cast<int>(Op::Count); ++i) {
    const auto op = static_cast<Op>(i);
    bool any = false;
    for (size_t n = 1; n <= 5 && !any; ++n) {
      any = kernels::supports(op, std::vector<D>(n, D::F32));
    }
    any = any || kernels::supports(op, {D::F32, D::I32}) || kernels::supports(op, {D::F32, D::F32, D::F32});
    EXPECT_TRUE(any) << op_name(op);
  }
}
