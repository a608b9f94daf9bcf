// Reading the rows of a packed weight (cpu/packed_weights.h) back in the standard layout, for the
// kernels that take one row at a time (embedding, to_f32) and for levels without packed kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ferry::kernels {

// Rows [first, first + count) of w, Layout::Packed, as standard rows of its dtype into `out`
// (count * w.row_bytes() bytes).
void unpack_rows(const Tensor& w, int64_t first, int64_t count, uint8_t* out);

// A pointer to row r of x in the standard layout: x.row(r) for Layout::Rows, else the row
// unpacked into `buffer` (resized to one row).
const void* standard_row(const Tensor& x, int64_t r, std::vector<uint8_t>& buffer);

}  // namespace ferry::kernels
