// pack_arena against the plain greedy it implements: every placed block scanned for each new one
// (quadratic, so only small inputs), on random lifetimes and sizes; and the layout's own promise,
// that blocks alive together never share a byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/arena.h"

namespace ferry {
namespace {

size_t aligned(size_t bytes, size_t alignment) {
  return (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
}

// Largest first (ties: first use, then index); each takes the lowest offset clear of every placed
// block whose lifetime meets its own.
ArenaLayout reference_pack(const std::vector<ArenaBlock>& blocks, size_t alignment) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = aligned(blocks[a].bytes, alignment), sb = aligned(blocks[b].bytes, alignment);
    if (sa != sb) return sa > sb;
    return blocks[a].first < blocks[b].first;
  });
  ArenaLayout layout;
  layout.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const size_t bytes = aligned(blocks[i].bytes, alignment);
    size_t offset = 0;
    for (bool moved = true; moved;) {  // until no overlapping block collides with [offset, offset + bytes)
      moved = false;
      for (size_t p : placed) {
        const bool together = !(blocks[p].last < blocks[i].first || blocks[i].last < blocks[p].first);
        const size_t p_end = layout.offsets[p] + aligned(blocks[p].bytes, alignment);
        if (together && layout.offsets[p] < offset + bytes && offset < p_end) {
          offset = p_end;
          moved = true;
        }
      }
    }
    layout.offsets[i] = offset;
    layout.size = std::max(layout.size, offset + bytes);
    placed.push_back(i);
  }
  return layout;
}

std::vector<ArenaBlock> random_blocks(std::mt19937& rng, int n, int steps, int longest) {
  std::vector<ArenaBlock> blocks;
  for (int i = 0; i < n; ++i) {
    const int64_t first = std::uniform_int_distribution<int64_t>(0, steps - 1)(rng);
    const int64_t length = std::uniform_int_distribution<int64_t>(0, longest)(rng);
    // Sizes from a few values, so equal sizes (ties) are common.
    const size_t bytes = size_t{1} << std::uniform_int_distribution<int>(0, 12)(rng);
    blocks.push_back({bytes - std::uniform_int_distribution<size_t>(0, bytes / 2)(rng), first,
                      std::min<int64_t>(steps - 1, first + length)});
  }
  return blocks;
}

TEST(Arena, MatchesThePlainGreedyOnRandomLifetimes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int steps = std::uniform_int_distribution<int>(1, 40)(rng);
    const auto blocks =
        random_blocks(rng, std::uniform_int_distribution<int>(0, 60)(rng), steps, trial % 3 == 0 ? steps : 4);
    const size_t alignment = size_t{1} << (trial % 7);
    const ArenaLayout got = pack_arena(blocks, alignment);
    // The plain greedy takes the lowest offset that fits; the gap scan must find the same one.
    const ArenaLayout want = reference_pack(blocks, alignment);
    ASSERT_EQ(got.offsets, want.offsets) << "trial " << trial;
    ASSERT_EQ(got.size, want.size) << "trial " << trial;
  }
}

TEST(Arena, BlocksAliveTogetherNeverShareAByte) {
  std::mt19937 rng(11);
  const auto blocks = random_blocks(rng, 3000, 400, 6);
  const ArenaLayout layout = pack_arena(blocks, 64);
  for (size_t a = 0; a < blocks.size(); ++a) {
    EXPECT_EQ(layout.offsets[a] % 64, 0u);
    EXPECT_LE(layout.offsets[a] + blocks[a].bytes, layout.size);
    for (size_t b = a + 1; b < blocks.size(); ++b) {
      if (blocks[a].last < blocks[b].first || blocks[b].last < blocks[a].first) continue;
      const bool apart = layout.offsets[a] + blocks[a].bytes <= layout.offsets[b] ||
                         layout.offsets[b] + blocks[b].bytes <= layout.offsets[a];
      ASSERT_TRUE(apart) << a << " and " << b;
    }
  }
  EXPECT_TRUE(pack_arena(std::vector<ArenaBlock>{}, 64).offsets.empty());
}

}  // namespace
}  // namespace ferry
