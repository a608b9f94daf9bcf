// Placement lookups, weight materialisation and the state store.
#include <cstring>

#include "backends/cpu/cpu_device.h"
#include "core/error.h"
#include "engine/weight_loader.h"
#include "fixture.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

std::string error_of(const std::function<void()>& fn, ErrorKind want) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), want) << error_kind_name(e.kind()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an Error(" << error_kind_name(want) << ")";
  return {};
}

}  // namespace

TEST(Placement, FindsModulesAndFallsBack) {
  cpu::CpuDevice d0(cpu_id(0), Allocator::kUnlimited, 1), d1(cpu_id(1), Allocator::kUnlimited, 1);
  Placement p{{{"embed", &d0}, {"layer.0", &d1}}, nullptr};
  EXPECT_EQ(&p.device_of("embed"), &d0);
  EXPECT_EQ(&p.device_of("layer.0"), &d1);
  const std::string msg = error_of([&] { p.device_of("head"); }, ErrorKind::Usage);
  EXPECT_TRUE(contains(msg, "'head'")) << msg;
  EXPECT_TRUE(contains(msg, "embed=cpu:0")) << msg;
  EXPECT_TRUE(contains(msg, "layer.0=cpu:1")) << msg;
  p.fallback = &d1;
  EXPECT_EQ(&p.device_of("head"), &d1);
  EXPECT_EQ(&Placement::single(d0).device_of("anything"), &d0);
}

TEST(WeightStore, MaterialisesOntoTheDeviceAndCountsBytes) {
  cpu::CpuDevice dev(cpu_id(1), 1 << 20, 2);
  const std::vector<float> values = random_values(4 * 64, 7);
  const Tensor host = host_f32(Shape{4, 64}, values, "w");
  WeightStore store;
  store.add("same", materialize_weight(host, dev, DType::F32, "same"));
  store.add("half", materialize_weight(host, dev, DType::F16, "half"));
  store.add("brain", materialize_weight(host, dev, DType::BF16, "brain"));

  const Tensor* same = store.find("same");
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(same->device(), &dev);
  EXPECT_EQ(same->name(), "same");
  EXPECT_EQ(to_vector(*same), values);
  const Tensor* half = store.find("half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->dtype(), DType::F16);
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(half->data_as<uint16_t>()[i], f32_to_f16(values[i])) << i;
  }
  // bf16 -> f16 goes through an f32 staging buffer.
  const Tensor bf16_host = *store.find("brain");
  const Tensor f16_from_bf16 = materialize_weight(bf16_host, dev, DType::F16, "converted");
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(f16_from_bf16.data_as<uint16_t>()[i], f32_to_f16(bf16_to_f32(f32_to_bf16(values[i])))) << i;
  }
  // f16 -> f32 widens exactly.
  const Tensor widened = materialize_weight(*half, dev, DType::F32, "widened");
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(widened.data_as<float>()[i], f16_to_f32(f32_to_f16(values[i])));

  EXPECT_EQ(store.find("absent"), nullptr);
  EXPECT_EQ(store.bytes_on(dev), 4u * 64 * (4 + 2 + 2));
  EXPECT_EQ(store.bytes_by_device().at("cpu:1"), 4u * 64 * 8);
  // Everything the store holds (plus the two loose tensors) is on the device's allocator.
  EXPECT_EQ(dev.allocator().live(), 4u * 64 * (4 + 2 + 2) + 4u * 64 * (2 + 4));
}

TEST(WeightStore, RejectsHostTensorsDuplicatesAndImpossibleDtypes) {
  cpu::CpuDevice dev(cpu_id(0), Allocator::kUnlimited, 1);
  WeightStore store;
  const Tensor host = host_f32(Shape{2, 40}, random_values(80, 1));
  std::string msg = error_of([&] { store.add("w", host); }, ErrorKind::Usage);
  EXPECT_TRUE(contains(msg, "'w'") && contains(msg, "host")) << msg;
  EXPECT_EQ(store.generation(), 0u) << "a refused weight changes nothing";
  store.add("w", materialize_weight(host, dev, DType::F32, "w"));
  const uint64_t generation = store.generation();
  EXPECT_NE(generation, 0u);
  msg = error_of([&] { store.add("w", materialize_weight(host, dev, DType::F32, "w")); }, ErrorKind::Usage);
  EXPECT_TRUE(contains(msg, "'w'") && contains(msg, "twice")) << msg;
  EXPECT_EQ(store.generation(), generation);
  store.clear();
  EXPECT_NE(store.generation(), generation);
  EXPECT_EQ(dev.allocator().live(), 0u);
  // 40 is not a multiple of q8_0's 32-element block.
  msg = error_of([&] { materialize_weight(host, dev, DType::Q8_0, "odd"); }, ErrorKind::Shape);
  EXPECT_TRUE(contains(msg, "'odd'") && contains(msg, "q8_0")) << msg;
}

TEST(WeightStore, OutOfBudgetNamesDeviceAndWeight) {
  cpu::CpuDevice dev(cpu_id(3), 1024, 1);
  const Tensor host = host_f32(Shape{16, 32}, random_values(512, 1));  // 2 KiB
  const std::string msg =
      error_of([&] { materialize_weight(host, dev, DType::F32, "big.weight"); }, ErrorKind::OutOfMemory);
  EXPECT_TRUE(contains(msg, "cpu:3") && contains(msg, "big.weight")) << msg;
  EXPECT_EQ(dev.allocator().live(), 0u);
  // As f16 it fits exactly.
  EXPECT_NO_THROW(materialize_weight(host, dev, DType::F16, "big.weight"));
}

TEST(StateStore, AllocatesZeroedStateOnItsModulesDeviceAndKeepsIt) {
  cpu::CpuDevice d0(cpu_id(0), Allocator::kUnlimited, 1), d1(cpu_id(1), 1 << 16, 1);
  Graph g;
  g.state("layer.0.k_cache", DType::F32, Shape{8, 16}, g.module("layer.0"));
  g.state("layer.1.k_cache", DType::F32, Shape{8, 16}, g.module("layer.1"));
  const Placement p{{{"layer.0", &d0}, {"layer.1", &d1}}, nullptr};
  StateStore states;
  const uint64_t empty = states.generation();
  states.ensure(g, p);
  EXPECT_NE(states.generation(), empty);
  ASSERT_EQ(states.size(), 2u);
  const Tensor* k0 = states.find("layer.0.k_cache");
  const Tensor* k1 = states.find("layer.1.k_cache");
  ASSERT_TRUE(k0 && k1);
  EXPECT_EQ(k0->device(), &d0);
  EXPECT_EQ(k1->device(), &d1);
  for (int64_t i = 0; i < k1->numel(); ++i) ASSERT_EQ(k1->data_as<float>()[i], 0.0f);
  EXPECT_EQ(states.bytes_on(d1), 8u * 16 * 4);
  EXPECT_EQ(states.bytes_by_device().at("cpu:0"), 8u * 16 * 4);
  EXPECT_EQ(d1.allocator().live(), 8u * 16 * 4);

  // Existing state is kept (same memory, contents intact) on the next ensure, which changes nothing.
  k1->data_as<float>()[5] = 3.5f;
  void* before = k1->data();
  const uint64_t generation = states.generation();
  states.ensure(g, p);
  EXPECT_EQ(states.generation(), generation);
  EXPECT_EQ(states.find("layer.1.k_cache")->data(), before);
  EXPECT_EQ(states.find("layer.1.k_cache")->data_as<float>()[5], 3.5f);
  EXPECT_EQ(d1.allocator().live(), 8u * 16 * 4);

  // A graph declaring another shape for existing state is refused.
  Graph longer;
  longer.state("layer.1.k_cache", DType::F32, Shape{16, 16}, longer.module("layer.1"));
  const std::string msg = error_of([&] { states.ensure(longer, p); }, ErrorKind::Shape);
  EXPECT_TRUE(contains(msg, "layer.1.k_cache") && contains(msg, "[8, 16]") && contains(msg, "[16, 16]")) << msg;

  const uint64_t before_clear = states.generation();
  states.clear();
  EXPECT_NE(states.generation(), before_clear);
  EXPECT_EQ(states.size(), 0u);
  EXPECT_EQ(d1.allocator().live(), 0u);
  EXPECT_EQ(d0.allocator().live(), 0u);
}

TEST(StateStore, OutOfBudgetAndUnplacedModules) {
  cpu::CpuDevice small(cpu_id(2), 256, 1);
  Graph g;
  g.state("kv", DType::F32, Shape{64, 16}, g.module("layer.0"));
  StateStore states;
  std::string msg = error_of([&] { states.ensure(g, Placement::single(small)); }, ErrorKind::OutOfMemory);
  EXPECT_TRUE(contains(msg, "cpu:2") && contains(msg, "kv")) << msg;
  msg = error_of([&] { states.ensure(g, Placement{}); }, ErrorKind::Usage);
  EXPECT_TRUE(contains(msg, "layer.0")) << msg;
  EXPECT_EQ(small.allocator().live(), 0u);
}
