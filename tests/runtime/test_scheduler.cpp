// The scheduler: which device each node gets, which copies it inserts, and what it refuses.
#include "backends/cpu/cpu_device.h"
#include "core/error.h"
#include "engine/weight_loader.h"
#include "fixture.h"

using namespace ferry;
using namespace ferry::testing;

namespace {

// A step as a comparable line: "copy a.hidden cpu:0->cpu:1 512 for b.norm_out" or "compute b.out cpu:1".
std::vector<std::string> lines(const Schedule& s) {
  std::vector<std::string> out;
  for (const auto& step : s.steps) {
    if (const auto* c = std::get_if<CopyStep>(&step)) {
      out.push_back(fmt::format("copy {} {}->{} {} for {}", c->value_name, location_name(c->from), location_name(c->to),
                                c->bytes, c->consumer_name));
    } else {
      const auto& n = std::get<ComputeStep>(step);
      out.push_back(fmt::format("compute {} {}", n.node_name, location_name(n.device)));
    }
  }
  return out;
}

constexpr size_t kActivation = kHidden * 4 * 4;  // [4, 32] f32

struct ScheduleTwoModules : ::testing::Test {
  cpu::CpuDevice d0{cpu_id(0), 1 << 20, 1};
  cpu::CpuDevice d1{cpu_id(1), 1 << 20, 1};
  TwoModuleWeights w;
  WeightStore weights;
  StateStore states;
  Placement placement{{{"a", &d0}, {"b", &d1}}, nullptr};
  Graph graph = two_module_graph(4);
};

}  // namespace

TEST_F(ScheduleTwoModules, InsertsOneCountedCopyPerCrossingValue) {
  load_two_module_weights(weights, w, d0, d1);
  const Schedule s = schedule(graph, placement, weights, states);
  const std::vector<std::string> want = {
      "copy ids host->cpu:0 16 for a.embed",
      "compute a.embed cpu:0",
      "compute a.hidden cpu:0",
      // a.hidden is read twice on cpu:1 (rms_norm and the last add) and crosses once.
      "copy a.hidden cpu:0->cpu:1 512 for b.norm_out",
      "copy positions host->cpu:1 16 for b.rope_out",
      "copy a.embed cpu:0->cpu:1 512 for b.residual",
      "compute b.norm_out cpu:1",
      "compute b.proj_out cpu:1",
      "compute b.rope_out cpu:1",
      "compute b.residual cpu:1",
      "compute b.out cpu:1",
      "copy b.out cpu:1->host 512 for output",
  };
  EXPECT_EQ(lines(s), want);
  EXPECT_EQ(s.n_splits(), 2u);
  EXPECT_EQ(s.n_copies(), 5u);
  EXPECT_EQ(s.bytes_copied(), 16 + 16 + 3 * kActivation);
  EXPECT_EQ(s.n_device_copies(), 2u);
  EXPECT_EQ(s.device_bytes_copied(), 2 * kActivation);

  ASSERT_EQ(s.splits.size(), 2u);
  EXPECT_EQ(s.splits[0].device, &d0);
  EXPECT_EQ(s.splits[0].n_nodes, 2u);
  EXPECT_EQ(s.splits[0].n_copies, 1u);
  EXPECT_EQ(s.splits[0].input_bytes, 16u);
  EXPECT_EQ(s.splits[1].device, &d1);
  EXPECT_EQ(s.splits[1].first_step, 3u);
  EXPECT_EQ(s.splits[1].end_step, 11u);
  EXPECT_EQ(s.splits[1].n_nodes, 5u);
  EXPECT_EQ(s.splits[1].input_bytes, 16 + 2 * kActivation);

  // Where each value starts, and the size of what each node makes.
  ASSERT_EQ(s.homes.size(), graph.values().size());
  const auto home = [&](const char* name) { return s.homes[static_cast<size_t>(graph.find(name))]; };
  EXPECT_EQ(home("ids"), nullptr);
  EXPECT_EQ(home("a.tok_embd"), &d0);
  EXPECT_EQ(home("b.proj"), &d1);
  EXPECT_EQ(home("a.hidden"), &d0);
  EXPECT_EQ(home("b.out"), &d1);
  for (const auto& step : s.steps) {
    if (const auto* c = std::get_if<ComputeStep>(&step)) {
      EXPECT_EQ(c->bytes, kActivation) << c->node_name;
    }
  }

  const std::string d = s.describe();
  EXPECT_TRUE(contains(d, "2 splits, 5 copies")) << d;
  EXPECT_TRUE(contains(d, "## split #0 on cpu:0: 2 nodes, 1 inputs (16 B)")) << d;
  EXPECT_TRUE(contains(d, "## split #1 on cpu:1: 5 nodes, 3 inputs (1.02 KiB)")) << d;
  EXPECT_TRUE(contains(d, "input a.hidden from cpu:0 (512 B), first read by b.norm_out")) << d;
  EXPECT_TRUE(contains(d, "node  b.rope_out (rope)")) << d;
  EXPECT_TRUE(contains(d, "output b.out from cpu:1 (512 B)")) << d;
}

TEST_F(ScheduleTwoModules, OneDeviceNeedsOnlyHostCopies) {
  load_two_module_weights(weights, w, d0, d0);
  const Schedule s = schedule(graph, Placement::single(d0), weights, states);
  EXPECT_EQ(s.n_splits(), 1u);
  EXPECT_EQ(s.n_device_copies(), 0u);
  EXPECT_EQ(s.n_copies(), 3u);  // ids, positions in; b.out back to host
  EXPECT_EQ(s.bytes_copied(), 16 + 16 + kActivation);
}

TEST_F(ScheduleTwoModules, WeightOnTheWrongDeviceIsAMismatchNotACopy) {
  load_two_module_weights(weights, w, d0, d1);
  WeightStore wrong;
  // b.norm loaded onto cpu:0 while module b runs on cpu:1.
  for (const auto& [name, t] : weights.all()) {
    wrong.add(name, name == "b.norm" ? materialize_weight(t, d0, t.dtype(), name) : t);
  }
  const Error e = error_of([&] { schedule(graph, placement, wrong, states); });
  EXPECT_EQ(e.kind(), ErrorKind::DeviceMismatch);
  const std::string msg = e.what();
  for (const char* part : {"b.norm_out", "(rms_norm)", "weight 'b.norm'", "cpu:0", "cpu:1", "module 'b'"}) {
    EXPECT_TRUE(contains(msg, part)) << part << " missing in: " << msg;
  }
}

TEST_F(ScheduleTwoModules, RefusesMissingWeightsUnplacedModulesAndBadShapes) {
  Error e = error_of([&] { schedule(graph, placement, weights, states); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "a.tok_embd") && contains(e.what(), "not loaded")) << e.what();

  load_two_module_weights(weights, w, d0, d1);
  e = error_of([&] { schedule(graph, Placement{{{"a", &d0}}, nullptr}, weights, states); });
  EXPECT_EQ(e.kind(), ErrorKind::Usage);
  EXPECT_TRUE(contains(e.what(), "module 'b'")) << e.what();

  WeightStore mis;
  for (const auto& [name, t] : weights.all()) {
    mis.add(name, name == "a.proj" ? materialize_weight(t, d0, DType::F16, name) : t);
  }
  e = error_of([&] { schedule(graph, placement, mis, states); });
  EXPECT_EQ(e.kind(), ErrorKind::Shape);
  EXPECT_TRUE(contains(e.what(), "a.proj") && contains(e.what(), "f16")) << e.what();
}

TEST(Scheduler, UnsupportedDtypesFailBeforeRunningNamingOpNodeDtypesAndDevice) {
  cpu::CpuDevice d0(cpu_id(0), Allocator::kUnlimited, 1);
  Graph g;
  GraphBuilder b(g);
  const ValueId x = g.input("x", DType::F32, Shape{2, 4});
  b.set_module("m");
  g.mark_output(b.matmul(x, b.weight("m.w", DType::I32, Shape{3, 4}), kNoValue, "m.y"));
  WeightStore weights;
  weights.add("m.w", Tensor::empty(d0, DType::I32, Shape{3, 4}));
  const Error e = error_of([&] { schedule(g, Placement::single(d0), weights, StateStore{}); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  for (const char* part : {"m.y", "matmul", "f32, i32", "cpu:0"}) {
    EXPECT_TRUE(contains(e.what(), part)) << part << " missing in: " << e.what();
  }
}

TEST(Scheduler, CopiesOncePerDestinationAndCountsSplitsByDeviceRuns) {
  cpu::CpuDevice d0(cpu_id(0), Allocator::kUnlimited, 1), d1(cpu_id(1), Allocator::kUnlimited, 1),
      d2(cpu_id(2), Allocator::kUnlimited, 1);
  Graph g;
  GraphBuilder b(g);
  const ValueId x = g.input("x", DType::F32, Shape{2, 4});
  b.set_module("p");
  const ValueId s = b.scale(x, 2.0f, "p.s");
  b.set_module("q");
  const ValueId q1 = b.add(s, s, "q.add");  // s read twice on cpu:1
  b.set_module("r");
  const ValueId r1 = b.mul(s, s, "r.mul");  // ... and twice on cpu:2
  b.set_module("p");
  const ValueId p2 = b.add(q1, r1, "p.sum");  // back on cpu:0: q1 and r1 come home
  b.set_module("q");
  g.mark_output(b.add(p2, s, "q.last"));  // s already on cpu:1: no new copy
  const Placement placement{{{"p", &d0}, {"q", &d1}, {"r", &d2}}, nullptr};
  const Schedule sched = schedule(g, placement, WeightStore{}, StateStore{});
  const std::vector<std::string> want = {
      "copy x host->cpu:0 32 for p.s",
      "compute p.s cpu:0",
      "copy p.s cpu:0->cpu:1 32 for q.add",
      "compute q.add cpu:1",
      "copy p.s cpu:0->cpu:2 32 for r.mul",
      "compute r.mul cpu:2",
      "copy q.add cpu:1->cpu:0 32 for p.sum",
      "copy r.mul cpu:2->cpu:0 32 for p.sum",
      "compute p.sum cpu:0",
      "copy p.sum cpu:0->cpu:1 32 for q.last",
      "compute q.last cpu:1",
      "copy q.last cpu:1->host 32 for output",
  };
  EXPECT_EQ(lines(sched), want);
  EXPECT_EQ(sched.n_splits(), 5u);
  EXPECT_EQ(sched.n_device_copies(), 5u);
}
