#include "core/arena.h"

#include <algorithm>
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
  struct Placed {
    size_t offset, end;
    int64_t first, last;
  };
  std::vector<Placed> placed;  // sorted by offset
  for (size_t index : order) {
    const ArenaBlock& b = blocks[index];
    const size_t bytes = aligned(b.bytes);
    // The lowest gap between blocks alive at the same time that holds this one.
    size_t offset = 0;
    for (const Placed& p : placed) {
      if (p.last < b.first || b.last < p.first) continue;  // never alive together
      if (p.offset >= offset + bytes) break;               // the gap before p fits
      offset = std::max(offset, p.end);
    }
    const Placed mine{offset, offset + bytes, b.first, b.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), mine,
                                   [](const Placed& x, const Placed& y) { return x.offset < y.offset; }),
                  mine);
    layout.offsets[index] = offset;
    layout.size = std::max(layout.size, mine.end);
  }
  return layout;
}

}  // namespace ferry
