// The executor: results against a naive reference, the copies it makes, byte accounting, tracing,
// the errors it raises, and KV state that stays on its layer's device across runs.
#include <cstdlib>
#include <sstream>

#include "backends/cpu/cpu_device.h"
#include "core/error.h"
#include "fixture.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

constexpr size_t kActivation = kHidden * 4 * 4;  // [4, 32] f32
const std::vector<int32_t> kIds = {3, 15, 0, 7};
const std::vector<int32_t> kPositions = {0, 1, 2, 5};

std::unordered_map<std::string, Tensor> two_module_inputs() {
  return {{"ids", host_i32(kIds)}, {"positions", host_i32(kPositions)}};
}

struct RunTwoModules : ::testing::Test {
  // Budgets large enough for weights and activations, small enough to be checked.
  cpu::CpuDevice d0{cpu_id(0), 64 << 10, 2};
  cpu::CpuDevice d1{cpu_id(1), 64 << 10, 2};
  TwoModuleWeights w;
  WeightStore weights;
  StateStore states;
  Placement placement{{{"a", &d0}, {"b", &d1}}, nullptr};
  Graph graph = two_module_graph(4);

  void SetUp() override { load_two_module_weights(weights, w, d0, d1); }
};

}  // namespace

TEST_F(RunTwoModules, MatchesTheNaiveReferenceWithCountedCopies) {
  const size_t base0 = d0.allocator().live(), base1 = d1.allocator().live();
  EXPECT_EQ(base0, weights.bytes_on(d0));
  EXPECT_EQ(base1, weights.bytes_on(d1));
  Executor exec(placement, weights, states);
  exec.set_trace(nullptr);
  auto out = exec.run(graph, two_module_inputs());

  ASSERT_EQ(out.size(), 1u);
  const Tensor& y = out.at("b.out");
  EXPECT_EQ(y.device(), nullptr);  // returned in host memory
  EXPECT_EQ(y.shape(), (Shape{4, kHidden}));
  expect_close(y, naive_two_module(w, kIds, kPositions), 1e-4);

  const RunStats& st = exec.stats();
  EXPECT_EQ(st.copies, 5u);
  EXPECT_EQ(st.bytes_moved, 32 + 3 * kActivation);
  EXPECT_EQ(st.device_copies, 2u);
  EXPECT_EQ(st.device_bytes_moved, 2 * kActivation);
  ASSERT_EQ(st.edges.size(), 5u);
  const auto edge = [](const CopyRecord& r) {
    return fmt::format("{} {}->{} {} for {}", r.value, r.from, r.to, r.bytes, r.consumer);
  };
  EXPECT_EQ(edge(st.edges[0]), "ids host->cpu:0 16 for a.embed");
  EXPECT_EQ(edge(st.edges[1]), "a.hidden cpu:0->cpu:1 512 for b.norm_out");
  EXPECT_EQ(edge(st.edges[2]), "positions host->cpu:1 16 for b.rope_out");
  EXPECT_EQ(edge(st.edges[3]), "a.embed cpu:0->cpu:1 512 for b.residual");
  EXPECT_EQ(edge(st.edges[4]), "b.out cpu:1->host 512 for output");

  ASSERT_EQ(st.devices.size(), 2u);
  EXPECT_EQ(st.devices[0].device, "cpu:0");
  EXPECT_EQ(st.devices[0].computes, 2u);
  EXPECT_EQ(st.devices[1].device, "cpu:1");
  EXPECT_EQ(st.devices[1].computes, 5u);
  ASSERT_NE(st.device("cpu:1"), nullptr);
  EXPECT_EQ(st.device("cpu:2"), nullptr);
  // Peaks are weights plus the activations that must coexist when each intermediate is freed after
  // its last read. cpu:0: a.embed and a.hidden (ids is freed after the embedding). cpu:1, at
  // b.proj_out and again at b.rope_out: four activations and the 16-byte positions (64 allocated).
  EXPECT_EQ(st.devices[0].peak_bytes, base0 + 2 * kActivation);
  EXPECT_EQ(st.devices[1].peak_bytes, base1 + 4 * kActivation + 64);
  // Intermediates live at offsets of one workspace per device, laid out by lifetime: it is the
  // peak's activations exactly, and the only thing a run leaves allocated besides the weights.
  EXPECT_EQ(exec.workspace_bytes(d0), 2 * kActivation);
  EXPECT_EQ(exec.workspace_bytes(d1), 4 * kActivation + 64);
  EXPECT_EQ(st.devices[1].workspace_bytes, 4 * kActivation + 64);
  EXPECT_EQ(d0.allocator().live(), base0 + exec.workspace_bytes(d0));
  EXPECT_EQ(d1.allocator().live(), base1 + exec.workspace_bytes(d1));
  EXPECT_EQ(exec.last_schedule().n_splits(), 2u);
}

TEST_F(RunTwoModules, FreesIntermediatesAfterTheirLastUse) {
  // A chain of 8 scales of a [4, 32] activation on one device: if each intermediate is freed after
  // its last read, only one input and one output are live at a time.
  Graph g;
  GraphBuilder b(g);
  ValueId x = g.input("x", DType::F32, Shape{4, kHidden});
  b.set_module("a");
  for (int i = 0; i < 8; ++i) x = b.scale(x, 1.5f, fmt::format("s{}", i));
  g.mark_output(x);
  const size_t base = d0.allocator().live();
  Executor exec(placement, weights, states);
  auto out = exec.run(g, {{"x", host_f32(Shape{4, kHidden}, random_values(4 * kHidden, 9))}});
  EXPECT_EQ(exec.stats().device("cpu:0")->peak_bytes, base + 2 * kActivation);
  EXPECT_EQ(exec.workspace_bytes(d0), 2 * kActivation);
  EXPECT_EQ(d0.allocator().live(), base + 2 * kActivation);
}

TEST_F(RunTwoModules, OneDeviceGivesIdenticalResultsWithoutDeviceCopies) {
  Executor two(placement, weights, states);
  const Tensor y2 = two.run(graph, two_module_inputs()).at("b.out");

  cpu::CpuDevice solo(cpu_id(7), 64 << 10, 2);  // same thread count as each of the two devices
  WeightStore solo_weights;
  load_two_module_weights(solo_weights, w, solo, solo);
  StateStore solo_states;
  Executor one(Placement::single(solo), solo_weights, solo_states);
  const Tensor y1 = one.run(graph, two_module_inputs()).at("b.out");

  EXPECT_EQ(to_vector(y1), to_vector(y2));
  EXPECT_EQ(one.stats().device_copies, 0u);
  EXPECT_EQ(one.stats().copies, 3u);
  EXPECT_EQ(one.stats().bytes_moved, 32 + kActivation);
  EXPECT_EQ(two.stats().device_copies, 2u);
}

TEST_F(RunTwoModules, TracesEveryCopy) {
  std::ostringstream trace;
  Executor exec(placement, weights, states);
  exec.set_trace(&trace);
  exec.run(graph, two_module_inputs());
  EXPECT_EQ(trace.str(),
            "[trace] step 0 copy ids -> a.embed host -> cpu:0 16 B\n"
            "[trace] step 3 copy a.hidden -> b.norm_out cpu:0 -> cpu:1 512 B\n"
            "[trace] step 4 copy positions -> b.rope_out host -> cpu:1 16 B\n"
            "[trace] step 5 copy a.embed -> b.residual cpu:0 -> cpu:1 512 B\n"
            "[trace] step 11 copy b.out -> output cpu:1 -> host 512 B\n");
}

TEST_F(RunTwoModules, TraceCanBeTurnedOnFromTheEnvironment) {
  ::setenv("FERRY_TRACE_DEVICES", "1", 1);
  Executor exec(placement, weights, states);
  ::unsetenv("FERRY_TRACE_DEVICES");
  ::testing::internal::CaptureStderr();
  exec.run(graph, two_module_inputs());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "[trace] step 3 copy a.hidden -> b.norm_out cpu:0 -> cpu:1 512 B\n")) << err;

  Executor quiet(placement, weights, states);  // variable unset: no trace
  ::testing::internal::CaptureStderr();
  quiet.run(graph, two_module_inputs());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(RunTwoModules, ExecutorRefusesAnOpThatSeesTwoDevices) {
  const size_t base0 = d0.allocator().live(), base1 = d1.allocator().live();
  Executor exec(placement, weights, states);
  exec.set_drop_device_copies_for_testing(true);
  const Error e = error_of([&] { exec.run(graph, two_module_inputs()); });
  EXPECT_EQ(e.kind(), ErrorKind::DeviceMismatch);
  EXPECT_TRUE(contains(e.what(), "op b.norm_out (rms_norm) reads a.hidden on cpu:0 and b.norm on cpu:1")) << e.what();
  EXPECT_TRUE(contains(e.what(), "runs on cpu:1")) << e.what();
  EXPECT_EQ(d0.allocator().live(), base0);
  EXPECT_EQ(d1.allocator().live(), base1);
}

TEST_F(RunTwoModules, RejectsMissingMisshapenAndUnknownInputs) {
  Executor exec(placement, weights, states);
  Error e = error_of([&] { exec.run(graph, {{"ids", host_i32(kIds)}}); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "'positions'") && contains(e.what(), "not supplied")) << e.what();

  e = error_of([&] { exec.run(graph, {{"ids", host_i32(kIds)}, {"positions", host_i32({0, 1, 2})}}); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "'positions'") && contains(e.what(), "[3]") && contains(e.what(), "[4]")) << e.what();

  e = error_of([&] {
    exec.run(graph, {{"ids", host_f32(Shape{4}, {0, 1, 2, 3})}, {"positions", host_i32(kPositions)}});
  });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "'ids'") && contains(e.what(), "f32") && contains(e.what(), "i32")) << e.what();

  auto extra = two_module_inputs();
  extra.emplace("mask", host_i32({1}));
  e = error_of([&] { exec.run(graph, extra); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "'mask'")) << e.what();
}

// An input already on a device: its reader there uses it in place, a reader elsewhere gets a
// counted device-to-device copy, never a copy through host memory.
TEST_F(RunTwoModules, InputsOnADeviceAreReadInPlaceOrCopiedDeviceToDevice) {
  const auto on = [&](Device& d, const std::vector<int32_t>& values) {
    Tensor t = Tensor::empty(d, DType::I32, Shape{static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), t.data_as<int32_t>());
    return t;
  };
  const Rows expected = naive_two_module(w, kIds, kPositions);
  Executor exec(placement, weights, states);
  // ids on cpu:0, where the embedding reads it; positions on cpu:0, read on cpu:1.
  auto out = exec.run(graph, {{"ids", on(d0, kIds)}, {"positions", on(d0, kPositions)}});
  expect_close(out.at("b.out"), expected, 1e-4);
  std::vector<std::string> edges;
  for (const auto& r : exec.stats().edges) edges.push_back(fmt::format("{} {}->{}", r.value, r.from, r.to));
  EXPECT_EQ(edges, (std::vector<std::string>{"a.hidden cpu:0->cpu:1", "positions cpu:0->cpu:1", "a.embed cpu:0->cpu:1",
                                             "b.out cpu:1->host"}));
  EXPECT_EQ(exec.stats().device_copies, 3u);
  // A prepared graph replans when an input moves (here: positions to cpu:1, where it is read).
  PreparedGraph prepared(graph);
  std::vector<Tensor> kept =
      exec.run_outputs_on_device(prepared, {{"ids", on(d0, kIds)}, {"positions", on(d0, kPositions)}});
  EXPECT_TRUE(exec.stats().planned);
  kept = exec.run_outputs_on_device(prepared, {{"ids", on(d0, kIds)}, {"positions", on(d1, kPositions)}});
  EXPECT_TRUE(exec.stats().planned);
  EXPECT_EQ(exec.stats().device_copies, 2u);
  expect_close(kept.at(0), expected, 1e-4);
}

// Outputs kept where they were made: no copy to host, the tensor handed over on its device and
// counted there until the caller drops it.
TEST_F(RunTwoModules, OutputsCanStayOnTheirDevice) {
  const size_t base1 = d1.allocator().live();
  Executor exec(placement, weights, states);
  PreparedGraph prepared(graph);
  std::vector<Tensor> out = exec.run_outputs_on_device(prepared, two_module_inputs());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].device(), &d1);
  EXPECT_EQ(out[0].shape(), (Shape{4, kHidden}));
  expect_close(out[0], naive_two_module(w, kIds, kPositions), 1e-4);
  EXPECT_EQ(exec.stats().copies, 4u);  // the four of a host run but the output's
  for (const auto& r : exec.stats().edges) EXPECT_NE(r.to, "host") << r.value;
  // The kept output is an allocation of its own, outside the workspace the next run reuses.
  EXPECT_EQ(d1.allocator().live(), base1 + exec.workspace_bytes(d1) + kActivation);
  out.clear();
  EXPECT_EQ(d1.allocator().live(), base1 + exec.workspace_bytes(d1));
  // The same prepared graph run to host afterwards replans and copies the output out again.
  std::vector<float> row(4 * kHidden);
  Tensor into =
      Tensor::view(Storage::view(row.data(), row.size() * sizeof(float), nullptr), 0, DType::F32, Shape{4, kHidden});
  exec.run(prepared, two_module_inputs(), std::span<Tensor>(&into, 1));
  EXPECT_TRUE(exec.stats().planned);
  EXPECT_EQ(exec.stats().copies, 5u);
  expect_close(into, naive_two_module(w, kIds, kPositions), 1e-4);
}

TEST_F(RunTwoModules, OutOfBudgetDeviceNamesItself) {
  // cpu:5 holds b's weights but has room for only two activations besides.
  const TwoModuleWeights& wt = w;
  cpu::CpuDevice tight(cpu_id(5), 128 + 2048 + 2 * kActivation, 1);
  WeightStore tight_weights;
  load_two_module_weights(tight_weights, wt, d0, tight);
  StateStore tight_states;
  const size_t base = tight.allocator().live();
  Executor exec(Placement{{{"a", &d0}, {"b", &tight}}, nullptr}, tight_weights, tight_states);
  const Error e = error_of([&] { exec.run(graph, two_module_inputs()); });
  EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
  EXPECT_TRUE(contains(e.what(), "out of memory on cpu:5")) << e.what();
  EXPECT_EQ(tight.allocator().live(), base);
}

// ---- KV state across runs ----

TEST(ExecutorState, KvCacheStaysOnItsLayersDeviceAcrossRuns) {
  cpu::CpuDevice d0(cpu_id(0), 64 << 10, 2), d1(cpu_id(1), 64 << 10, 2);
  const AttnWeights w;
  WeightStore weights;
  load_attention_weights(weights, w, d0, d1);
  const Placement placement{{{"embed", &d0}, {"layer", &d1}}, nullptr};
  const std::vector<int32_t> ids = {4, 9, 1, 12, 6};

  // Two steps: three tokens, then two more appended at kv_offset 3.
  StateStore states;
  Executor exec(placement, weights, states);
  const Tensor first = exec.run(attention_graph(3, 0), {{"ids", host_i32({4, 9, 1})}}).at("layer.attn");
  ASSERT_NE(states.find("layer.k_cache"), nullptr);
  EXPECT_EQ(states.find("layer.k_cache")->device(), &d1);
  EXPECT_EQ(states.find("layer.v_cache")->device(), &d1);
  EXPECT_EQ(states.bytes_on(d1), 2u * kCacheRows * kKvWidth * 4);
  EXPECT_EQ(states.bytes_on(d0), 0u);
  const Tensor second = exec.run(attention_graph(2, 3), {{"ids", host_i32({12, 6})}}).at("layer.attn");
  // Only the embedding output crossed between devices; the cache never moved.
  EXPECT_EQ(exec.stats().device_copies, 1u);
  EXPECT_EQ(exec.stats().edges[1].value, "embed.out");

  // One longer step over all five tokens with a fresh cache.
  StateStore fresh;
  Executor once(placement, weights, fresh);
  const Tensor all = once.run(attention_graph(5, 0), {{"ids", host_i32(ids)}}).at("layer.attn");

  const std::vector<float> a = rows_of(all, 0, 5);
  std::vector<float> stepped = rows_of(first, 0, 3);
  const std::vector<float> tail = rows_of(second, 0, 2);
  stepped.insert(stepped.end(), tail.begin(), tail.end());
  ASSERT_EQ(stepped.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(stepped[i], a[i], 1e-5) << i;
  expect_close(all, naive_attention(w, ids), 1e-4);

  // Both caches hold the same keys for the five positions.
  EXPECT_EQ(rows_of(*states.find("layer.k_cache"), 0, 5), rows_of(*fresh.find("layer.k_cache"), 0, 5));
}
