#include "core/arena.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace ferry {

ArenaLayout pack_arena(std::span<const ArenaBlock> blocks, size_t alignment) {
  const auto aligned = [&](size_t bytes) { return (std::max<size_t>(bytes, 1) + alignment - 1) & ~(alignment - 1); };
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const size_t sa = aligned(blocks[a].bytes), sb = aligned(blocks[b].bytes);
    if (sa != sb) return sa > sb;
    if (blocks[a].first != blocks[b].first) return blocks[a].first < blocks[b].first;
    return a < b;
  });

  ArenaLayout layout;
  layout.offsets.assign(blocks.size(), 0);
  if (blocks.empty()) return layout;
  // A block only meets the placed blocks alive in its own steps. Each step keeps the placed blocks
  // alive then, so a block's candidates cost its lifetime's length, not every block placed so far
  // (models of a thousand layers have tens of thousands of short-lived blocks).
  int64_t first_step = blocks[0].first, last_step = blocks[0].last;
  for (const ArenaBlock& b : blocks) {
    first_step = std::min(first_step, b.first);
    last_step = std::max(last_step, b.last);
  }
  std::vector<std::vector<size_t>> alive(static_cast<size_t>(last_step - first_step + 1));
  std::vector<size_t> seen(blocks.size(), SIZE_MAX);  // the block whose candidates last listed it
  std::vector<size_t> candidates;
  for (size_t index : order) {
    const ArenaBlock& b = blocks[index];
    const size_t bytes = aligned(b.bytes);
    candidates.clear();
    for (int64_t t = b.first; t <= b.last; ++t) {
      for (size_t other : alive[static_cast<size_t>(t - first_step)]) {
        if (seen[other] != index) {
          seen[other] = index;
          candidates.push_back(other);
        }
      }
    }
    std::sort(candidates.begin(), candidates.end(), [&](size_t x, size_t y) {
      return layout.offsets[x] != layout.offsets[y] ? layout.offsets[x] < layout.offsets[y] : x < y;
    });
    // The lowest gap between the blocks alive at the same time that holds this one.
    size_t offset = 0;
    for (size_t other : candidates) {
      if (layout.offsets[other] >= offset + bytes) break;  // the gap before it fits
      offset = std::max(offset, layout.offsets[other] + aligned(blocks[other].bytes));
    }
    layout.offsets[index] = offset;
    layout.size = std::max(layout.size, offset + bytes);
    for (int64_t t = b.first; t <= b.last; ++t) alive[static_cast<size_t>(t - first_step)].push_back(index);
  }
  return layout;
}

}  // namespace ferry
