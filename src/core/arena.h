// Packs blocks with lifetimes into one buffer: every block gets an offset such that two blocks whose
// lifetimes overlap never share a byte. The runtime lays out each device's workspace with it, and
// the planner sizes workspaces with the same function on the same lifetimes, so what the plan says
// is what is allocated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry {

struct ArenaBlock {
  size_t bytes = 0;
  int64_t first = 0;  // first step that uses it (it is written there)
  int64_t last = 0;   // last step that uses it (inclusive)
};

struct ArenaLayout {
  std::vector<size_t> offsets;  // by block, multiples of the alignment
  size_t size = 0;              // bytes the buffer needs
};

// Greedy by size (largest first, ties by first use, then index): each block takes the lowest
// offset that fits between the blocks already placed whose lifetimes overlap its own. Every block's
// size is rounded up to `alignment` (a power of two). Deterministic: the same blocks give the same
// layout.
ArenaLayout pack_arena(std::span<const ArenaBlock> blocks, size_t alignment);

}  // namespace ferry
