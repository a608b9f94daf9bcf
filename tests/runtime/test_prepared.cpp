// Prepared graphs: planned once and run many times with new node parameters (a decode step's cache
// offset). Results, copies and allocator accounting must stay those of a fresh run, and the plan
// must be redone whenever what it points at changes.
#include <span>

#include "backends/cpu/cpu_device.h"
#include "core/error.h"
#include "engine/weight_loader.h"
#include "fixture.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

// A host tensor over `buffer`, for an executor to write an output into.
Tensor view_of(std::vector<float>& buffer, const Shape& shape) {
  return Tensor::view(Storage::view(buffer.data(), buffer.size() * sizeof(float), nullptr), 0, DType::F32, shape);
}

// The attention node of attention_graph(), whose kv_offset a decode step advances.
int attention_node(const Graph& g) {
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].op == Op::Attention) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no attention node";
  return -1;
}

void expect_rows_near(const std::vector<float>& got, const Rows& want, double tol) {
  ASSERT_EQ(got.size(), want.size() * static_cast<size_t>(kHidden));
  for (size_t t = 0; t < want.size(); ++t) {
    for (size_t j = 0; j < want[t].size(); ++j) {
      ASSERT_NEAR(got[t * want[t].size() + j], want[t][j], tol) << "row " << t << " col " << j;
    }
  }
}

std::vector<std::string> edge_lines(const RunStats& st) {
  std::vector<std::string> out;
  for (const auto& r : st.edges)
    out.push_back(fmt::format("{} {}->{} {} for {}", r.value, r.from, r.to, r.bytes, r.consumer));
  return out;
}

struct PreparedAttention : ::testing::Test {
  cpu::CpuDevice d0{cpu_id(0), 64 << 10, 2};
  cpu::CpuDevice d1{cpu_id(1), 64 << 10, 2};
  AttnWeights w;
  WeightStore weights;
  StateStore states;
  Placement placement{{{"embed", &d0}, {"layer", &d1}}, nullptr};

  void SetUp() override { load_attention_weights(weights, w, d0, d1); }

  // Runs a one-token step at cache row `offset`; returns its output row.
  std::vector<float> step(Executor& exec, PreparedGraph& g, int32_t id, int64_t offset) {
    g.set_params(attention_node(g.graph()), attn_params(offset));
    std::vector<float> row(kHidden);
    Tensor out = view_of(row, Shape{1, kHidden});
    exec.run(g, {{"ids", host_i32({id})}}, std::span<Tensor>(&out, 1));
    return row;
  }
};

}  // namespace

TEST_F(PreparedAttention, DecodeStepsReuseOnePlanAndMatchTheReference) {
  const std::vector<int32_t> ids = {4, 9, 1, 12, 6};
  Executor exec(placement, weights, states);
  PreparedGraph prompt(attention_graph(2, 0));
  std::vector<float> got(2 * kHidden);
  Tensor out = view_of(got, Shape{2, kHidden});
  exec.run(prompt, {{"ids", host_i32({4, 9})}}, std::span<Tensor>(&out, 1));
  EXPECT_TRUE(exec.stats().planned);

  // Weights, both caches and the workspace are all that stays allocated between steps.
  const size_t live0 = d0.allocator().live(), live1 = d1.allocator().live();
  EXPECT_EQ(live1, weights.bytes_on(d1) + states.bytes_on(d1) + exec.workspace_bytes(d1));
  // At layer.v the embedding's copy, q, k and v are live; at the attention q, k, v and its output:
  // 2 x 256 + 2 x 128 bytes either way for the two-token prompt.
  EXPECT_EQ(exec.workspace_bytes(d1), 2 * 256 + 2 * 128);
  PreparedGraph decode(attention_graph(1, 0));
  std::vector<std::string> first_edges;
  size_t first_peak = 0;
  for (int64_t t = 2; t < 5; ++t) {
    const std::vector<float> row = step(exec, decode, ids[static_cast<size_t>(t)], t);
    got.insert(got.end(), row.begin(), row.end());
    const RunStats& st = exec.stats();
    EXPECT_EQ(st.planned, t == 2) << "step " << t << ": only the first run of the prepared graph plans";
    EXPECT_EQ(st.device_copies, 1u);
    ASSERT_NE(st.device("cpu:1"), nullptr);
    EXPECT_EQ(st.device("cpu:1")->computes, 4u);
    if (t == 2) {
      first_edges = edge_lines(st);
      first_peak = st.device("cpu:1")->peak_bytes;
    }
    EXPECT_EQ(edge_lines(st), first_edges);
    EXPECT_EQ(st.device("cpu:1")->peak_bytes, first_peak) << "a reused plan allocates nothing";
    EXPECT_EQ(d0.allocator().live(), live0);
    EXPECT_EQ(d1.allocator().live(), live1);
  }
  EXPECT_EQ(first_edges,
            (std::vector<std::string>{"ids host->cpu:0 4 for embed.out", "embed.out cpu:0->cpu:1 128 for layer.q",
                                      "layer.attn cpu:1->host 128 for output"}));
  // The decode steps run in the prompt step's workspace: nothing is allocated per step.
  EXPECT_EQ(first_peak, live1);

  // The same five tokens in one run of a fresh graph and cache, and the naive reference.
  StateStore fresh_states;
  Executor fresh(placement, weights, fresh_states);
  const Tensor all = fresh.run(attention_graph(5, 0), {{"ids", host_i32(ids)}}).at("layer.attn");
  const std::vector<float> whole = rows_of(all, 0, 5);
  ASSERT_EQ(got.size(), whole.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], whole[i], 1e-5) << i;
  expect_rows_near(got, naive_attention(w, ids), 1e-4);
}

TEST_F(PreparedAttention, ReplansWhenTheStateIsCleared) {
  Executor exec(placement, weights, states);
  PreparedGraph decode(attention_graph(1, 0));
  step(exec, decode, 4, 0);
  step(exec, decode, 9, 1);
  EXPECT_FALSE(exec.stats().planned);

  // A new sequence: the caches are freed, so the plan's pointers to them are stale.
  states.clear();
  EXPECT_EQ(d1.allocator().live(), weights.bytes_on(d1) + exec.workspace_bytes(d1));
  const std::vector<float> row = step(exec, decode, 1, 0);
  EXPECT_TRUE(exec.stats().planned);
  ASSERT_NE(states.find("layer.k_cache"), nullptr);
  EXPECT_EQ(states.find("layer.k_cache")->device(), &d1);
  // A single token attends only to itself in the new cache.
  expect_rows_near(row, naive_attention(w, {1}), 1e-4);
}

TEST_F(PreparedAttention, ReplansForAnotherExecutorAndForNewWeights) {
  Executor a(placement, weights, states);
  Executor b(placement, weights, states);
  PreparedGraph decode(attention_graph(1, 0));
  const std::vector<float> first = step(a, decode, 7, 0);
  EXPECT_TRUE(a.stats().planned);
  EXPECT_EQ(step(a, decode, 7, 0), first);
  EXPECT_FALSE(a.stats().planned);
  EXPECT_EQ(step(b, decode, 7, 0), first);
  EXPECT_TRUE(b.stats().planned);
  EXPECT_EQ(step(a, decode, 7, 0), first);
  EXPECT_TRUE(a.stats().planned);

  weights.add("unused", materialize_weight(host_f32(Shape{4}, {1, 2, 3, 4}), d0, DType::F32, "unused"));
  EXPECT_EQ(step(a, decode, 7, 0), first);
  EXPECT_TRUE(a.stats().planned);
}

TEST_F(PreparedAttention, TheDeviceCheckStillGuardsAReusedGraph) {
  Executor exec(placement, weights, states);
  PreparedGraph decode(attention_graph(1, 0));
  const std::vector<float> good = step(exec, decode, 3, 0);
  const size_t live0 = d0.allocator().live(), live1 = d1.allocator().live();

  exec.set_drop_device_copies_for_testing(true);
  const Error e = error_of([&] { step(exec, decode, 3, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::DeviceMismatch);
  EXPECT_TRUE(contains(e.what(), "op layer.q (matmul) reads embed.out on cpu:0 and layer.wq on cpu:1")) << e.what();
  EXPECT_EQ(d0.allocator().live(), live0);
  EXPECT_EQ(d1.allocator().live(), live1);
  EXPECT_TRUE(exec.stats().edges.empty()) << "a failed run reports no copies";

  exec.set_drop_device_copies_for_testing(false);
  EXPECT_EQ(step(exec, decode, 3, 0), good);
  EXPECT_TRUE(exec.stats().planned);
}

TEST_F(PreparedAttention, RefusesBadOutputsAndAnotherKindOfParameters) {
  Executor exec(placement, weights, states);
  PreparedGraph decode(attention_graph(1, 0));
  const Executor::Inputs inputs = {{"ids", host_i32({5})}};

  Error e = error_of([&] { exec.run(decode, inputs, {}); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "1 outputs but 0")) << e.what();

  Tensor on_device = Tensor::empty(d1, DType::F32, Shape{1, kHidden});
  e = error_of([&] { exec.run(decode, inputs, std::span<Tensor>(&on_device, 1)); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "'layer.attn'") && contains(e.what(), "on cpu:1")) << e.what();

  std::vector<float> two_rows(2 * kHidden);
  Tensor misshapen = view_of(two_rows, Shape{2, kHidden});
  e = error_of([&] { exec.run(decode, inputs, std::span<Tensor>(&misshapen, 1)); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "f32 [1, 32]") && contains(e.what(), "f32 [2, 32]")) << e.what();

  const int node = attention_node(decode.graph());
  e = error_of([&] { decode.set_params(node, RopeParams{}); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "layer.attn") && contains(e.what(), "attention")) << e.what();
  EXPECT_TRUE(std::holds_alternative<AttentionParams>(decode.graph().nodes()[static_cast<size_t>(node)].params));
  e = error_of([&] { decode.set_params(99, attn_params(0)); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "99")) << e.what();
}

TEST(PreparedTwoModules, FillsOutputsThatAreInputsOrRepeats) {
  cpu::CpuDevice d0(cpu_id(0), 64 << 10, 2), d1(cpu_id(1), 64 << 10, 2);
  const TwoModuleWeights w;
  WeightStore weights;
  load_two_module_weights(weights, w, d0, d1);
  StateStore states;
  Executor exec(Placement{{{"a", &d0}, {"b", &d1}}, nullptr}, weights, states);
  Graph g = two_module_graph(4);
  g.mark_output(g.find("ids"));
  g.mark_output(g.find("b.out"));
  const std::vector<int32_t> ids = {3, 15, 0, 7};
  const Executor::Inputs inputs = {{"ids", host_i32(ids)}, {"positions", host_i32({0, 1, 2, 5})}};

  // Through the map: an input output is the supplied tensor itself.
  const auto by_name = exec.run(g, inputs);
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_EQ(by_name.at("ids").data(), inputs.at("ids").data());
  expect_close(by_name.at("b.out"), naive_two_module(w, ids, {0, 1, 2, 5}), 1e-4);
  EXPECT_EQ(exec.stats().copies, 5u) << "b.out crosses to host once";

  // Into the caller's tensors: every position is filled, the repeat and the input by copying.
  PreparedGraph prepared(g);
  std::vector<float> first(4 * kHidden, -1.0f), repeat(4 * kHidden, -1.0f);
  std::vector<Tensor> outs = {view_of(first, Shape{4, kHidden}), Tensor::host(DType::I32, Shape{4}),
                              view_of(repeat, Shape{4, kHidden})};
  exec.run(prepared, inputs, outs);
  EXPECT_EQ(first, to_vector(by_name.at("b.out")));
  EXPECT_EQ(repeat, first);
  const int32_t* got_ids = outs[1].data_as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(got_ids, got_ids + 4), ids);
  EXPECT_EQ(exec.stats().copies, 5u);

  // An input supplied on a device comes back to host through a counted copy, like any output.
  Tensor device_ids = Tensor::empty(d0, DType::I32, Shape{4});
  std::copy(ids.begin(), ids.end(), device_ids.data_as<int32_t>());
  const auto from_device = exec.run(g, {{"ids", device_ids}, {"positions", inputs.at("positions")}});
  EXPECT_EQ(from_device.at("ids").device(), nullptr);
  const int32_t* back = from_device.at("ids").data_as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(back, back + 4), ids);
  expect_close(from_device.at("b.out"), naive_two_module(w, ids, {0, 1, 2, 5}), 1e-4);
}
