#include <gtest/gtest.h>

#include "backends/cpu/cpu_device.h"
#include "backends/registry.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/tensor.h"

using namespace ferry;

TEST(DeviceId, ParsesAndPrints) {
  EXPECT_EQ(DeviceId::parse("cpu:1").index, 1);
  EXPECT_EQ(DeviceId::parse("cpu").index, 0);
  EXPECT_EQ(DeviceId::parse("cpu:3").str(), "cpu:3");
  // cuda:N names a planning target; creating one is refused.
  EXPECT_EQ(DeviceId::parse("cuda:2").str(), "cuda:2");
  EXPECT_EQ(DeviceId::parse("cuda:2").type, DeviceType::Cuda);
  EXPECT_THROW(DeviceSet(parse_device_list("cuda:0"), 1), Error);
  EXPECT_THROW(DeviceId::parse("gpu:0"), Error);
  EXPECT_THROW(DeviceId::parse("cpu:x"), Error);
  EXPECT_THROW(DeviceId::parse("cpu:-1"), Error);
}

TEST(DeviceList, ParsesBudgets) {
  auto specs = parse_device_list("cpu:0=6GiB,cpu:1=512MiB,cpu:2");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].budget, 6ull << 30);
  EXPECT_EQ(specs[1].budget, 512ull << 20);
  EXPECT_EQ(specs[2].budget, Allocator::kUnlimited);
  EXPECT_THROW(parse_device_list("cpu:0,cpu:0"), Error);
  EXPECT_THROW(parse_device_list("cpu:0=lots"), Error);
  EXPECT_THROW(parse_device_list("cpu:0,,cpu:1"), Error);
  // "@N": the device's own worker threads; the list prints back as it was written.
  const auto threaded = parse_device_list("cpu:0=1GiB@3,cpu:1@1");
  EXPECT_EQ(threaded[0].threads, 3);
  EXPECT_EQ(threaded[0].budget, 1ull << 30);
  EXPECT_EQ(threaded[1].threads, 1);
  EXPECT_EQ(format_device_list(threaded), "cpu:0=1073741824@3,cpu:1@1");
  EXPECT_THROW(parse_device_list("cpu:0@0"), Error);
  EXPECT_THROW(parse_device_list("cpu:0@x"), Error);
  DeviceSet set(threaded, 8);
  EXPECT_EQ(set.at(0).threads(), 3);
  // The default: at least one CPU device, numbered from 0.
  const auto defaults = default_devices();
  ASSERT_FALSE(defaults.empty());
  EXPECT_EQ(defaults[0].id.str(), "cpu:0");
}

TEST(Allocator, CountsLiveAndPeakAndRefusesOverBudget) {
  cpu::CpuDevice dev(DeviceId{DeviceType::Cpu, 1}, 4096, 1);
  {
    Tensor a = Tensor::empty(dev, DType::F32, Shape{16, 16}, "a");  // 1024 bytes
    EXPECT_EQ(dev.allocator().live(), 1024u);
    {
      Tensor b = Tensor::empty(dev, DType::F32, Shape{16, 32}, "b");  // 2048 bytes
      EXPECT_EQ(dev.allocator().live(), 3072u);
    }
    EXPECT_EQ(dev.allocator().live(), 1024u);
    EXPECT_EQ(dev.allocator().peak(), 3072u);
    try {
      Tensor c = Tensor::empty(dev, DType::F32, Shape{32, 32}, "big");
      FAIL() << "expected out of memory";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
      const std::string msg = e.what();
      EXPECT_NE(msg.find("cpu:1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("big"), std::string::npos) << msg;
      EXPECT_NE(msg.find("4.00 KiB"), std::string::npos) << msg;
    }
    EXPECT_EQ(dev.allocator().live(), 1024u);
  }
  EXPECT_EQ(dev.allocator().live(), 0u);
}

TEST(DeviceSet, SplitsThreadsAndFindsDevices) {
  DeviceSet set(parse_device_list("cpu:0,cpu:1"), 4);
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.at(0).threads(), 2);
  EXPECT_EQ(set.get(DeviceId{DeviceType::Cpu, 1}).name(), "cpu:1");
  EXPECT_THROW(set.get(DeviceId{DeviceType::Cpu, 7}), Error);
}

TEST(DType, BlockSizes) {
  EXPECT_EQ(*dtype_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(*dtype_bytes(DType::Q4_0, 64), 36u);
  EXPECT_EQ(*dtype_bytes(DType::BF16, 3), 6u);
  EXPECT_FALSE(dtype_bytes(DType::Q8_0, 33).has_value());
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("q5_k"), DType::Q5_K);
  EXPECT_EQ(*dtype_bytes(DType::Q5_K, 512), 352u);
  EXPECT_FALSE(dtype_from_name("iq2_xxs").has_value());
}

TEST(Half, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(f16_to_f32(f32_to_f16(f)), f);
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f + 1.0f / 4096)), 1.0f);  // ties to even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // ties to even
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  // Every f16 bit pattern that is not NaN survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(ThreadPool, RunsEveryTaskOnceAndForwardsErrors) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t t, int thread) {
    ASSERT_LT(thread, 3);
    hits[static_cast<size_t>(t)]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(10,
                                 [](int64_t t, int) {
                                   if (t == 5) throw Error(ErrorKind::Internal, "boom");
                                 }),
               Error);
  int64_t sum = 0;
  std::mutex m;
  pool.parallel_range(12345, 100, [&](int64_t b, int64_t e, int) {
    std::lock_guard<std::mutex> lock(m);
    sum += e - b;
  });
  EXPECT_EQ(sum, 12345);
}

TEST(Tensor, ReshapeKeepsBytes) {
  Tensor t = Tensor::host(DType::F32, Shape{4, 6}, "t");
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.row_bytes(), 24u);
  Tensor r = t.reshape(Shape{2, 12});
  EXPECT_EQ(r.data(), t.data());
  EXPECT_THROW(t.reshape(Shape{5, 5}), Error);
  EXPECT_THROW(Tensor::host(DType::Q4_0, Shape{2, 31}), Error);
}

TEST(Error, MessagesKeepTextAndEscapeRawBytes) {
  EXPECT_EQ(printable_message("plain\n  second line\tand tab"), "plain\n  second line\tand tab");
  EXPECT_EQ(printable_message("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80");
  // A terminal escape, a NUL, a carriage return, DEL: escaped.
  EXPECT_EQ(printable_message(std::string("a\x1b[31mb\0c\rd\x7f", 12)), "a\\x1b[31mb\\x00c\\x0dd\\x7f");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong '/', a surrogate, a C1 control.
  EXPECT_EQ(printable_message("\x80"), "\\x80");
  EXPECT_EQ(printable_message("x\xe4\xb8"), "x\\xe4\\xb8");
  EXPECT_EQ(printable_message("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable_message("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable_message("\xc2\x9b"), "\\xc2\\x9b");
}
