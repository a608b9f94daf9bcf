// The 64 bytes ldtilecfg reads to shape the AMX tile registers (palette 1): for tile i, its rows
// and the bytes of each row (at most 16 and 64). The amx level's loops (amx.cpp) and the tile
// probes (peak.cpp) each load their own.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ferry::kernels::cpu {

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};

  // Tile i of `rows` rows of `bytes` bytes.
  constexpr AmxTileConfig& tile(int i, uint8_t n_rows, uint16_t bytes) {
    rows[i] = n_rows;
    colsb[i] = bytes;
    return *this;
  }
};
static_assert(sizeof(AmxTileConfig) == 64, "ldtilecfg reads 64 bytes");
static_assert(offsetof(AmxTileConfig, colsb) == 16 && offsetof(AmxTileConfig, rows) == 48, "the palette-1 layout");

}  // namespace ferry::kernels::cpu
