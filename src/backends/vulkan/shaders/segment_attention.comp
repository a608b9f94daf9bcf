#version 450
// Non-causal attention inside one segment (the host dispatches once per segment): query rows
// [p5, p5 + p0) attend to key/value rows [p6, p6 + p7). A workgroup takes 8 query rows of one head
// and walks the segment's keys 64 at a time with an online softmax (running maximum and sum, the
// output rescaled as the maximum grows), so each K/V row it reads serves 8 queries and there is
// no score matrix. Scores: invocation j takes key j of the tile against the 8 rows. Softmax and
// values: 8 invocations per row, each with the dims lane, lane + 8, ... and a share of the sum.
// p0 query rows, p1 heads, p2 kv heads, p3 head_dim (<= 256), p4 scale bits, p5 first query row,
// p6 first key row, p7 key rows (> 0). Groups: ceil(p0 / 8) * p1, row tile major.
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

const uint kRows = 8u;    // query rows per workgroup
const uint kLanes = 8u;   // invocations per row in the softmax and value passes (64 / kRows)
const uint kKeys = 64u;   // keys per tile: one per invocation
const uint kMaxDims = 32u;  // dims per invocation: 256 / kLanes

shared float q_tile[kRows * 256u];  // [row, dim], rows head_dim apart
shared float scores[kRows * kKeys];  // [row, key]: the tile's scores, then its weights
shared float lane_sums[64];

void main() {
  if (extra_group()) return;
  const uint rows = pc.p[0], heads = pc.p[1], kv_heads = pc.p[2], hd = pc.p[3];
  const float scale = pf(4);
  const uint q_first = pc.p[5], k_first = pc.p[6], n_keys = pc.p[7];
  const uint g = group_index();
  const uint h = g % heads;
  const uint row0 = (g / heads) * kRows;  // the tile's first row, inside the segment
  const uint n_rows = min(kRows, rows - row0);
  const uint tid = gl_LocalInvocationID.x;
  const uint width = heads * hd;
  const uint kv_width = kv_heads * hd;
  const uint kv_col = (h / (heads / kv_heads)) * hd;

  // Rows past the segment's end score zeros and write nothing.
  for (uint i = tid; i < kRows * hd; i += 64u) {
    const uint r = i / hd;
    q_tile[i] = r < n_rows ? q[pc.off[0] + (q_first + row0 + r) * width + h * hd + i % hd] : 0.0;
  }
  barrier();

  const uint r = tid / kLanes;    // this invocation's row in the softmax and value passes
  const uint lane = tid % kLanes;
  float running_max = -1.0 / 0.0;
  float lane_sum = 0.0;  // this lane's share of row r's running sum
  float acc[kMaxDims];   // row r, dims lane + kLanes * i
  for (uint i = 0u; i < kMaxDims; ++i) acc[i] = 0.0;

  for (uint base = 0u; base < n_keys; base += kKeys) {
    const uint n = min(kKeys, n_keys - base);
    if (tid < n) {
      const uint kb = pc.off[1] + (k_first + base + tid) * kv_width + kv_col;
      float s[kRows];
      for (uint i = 0u; i < kRows; ++i) s[i] = 0.0;
      for (uint d = 0u; d < hd; ++d) {
        const float kd = k[kb + d];
        for (uint i = 0u; i < kRows; ++i) s[i] += q_tile[i * hd + d] * kd;
      }
      for (uint i = 0u; i < kRows; ++i) scores[i * kKeys + tid] = s[i] * scale;
    }
    barrier();
    // Every lane of a row finds the same maximum the same way.
    float tile_max = -1.0 / 0.0;
    for (uint j = 0u; j < n; ++j) tile_max = max(tile_max, scores[r * kKeys + j]);
    const float new_max = max(running_max, tile_max);
    const float correction = exp(running_max - new_max);  // 0 on the first tile
    running_max = new_max;
    barrier();  // every maximum read before the weights overwrite the scores
    float part = 0.0;
    for (uint j = lane; j < n; j += kLanes) {
      const float p = exp(scores[r * kKeys + j] - new_max);
      scores[r * kKeys + j] = p;
      part += p;
    }
    lane_sum = lane_sum * correction + part;
    barrier();
    for (uint i = 0u; i < kMaxDims; ++i) acc[i] *= correction;
    const uint vb = pc.off[2] + (k_first + base) * kv_width + kv_col + lane;
    for (uint j = 0u; j < n; ++j) {
      const float p = scores[r * kKeys + j];
      for (uint i = 0u; i < kMaxDims; ++i) {
        const uint d = lane + kLanes * i;
        if (d >= hd) break;
        acc[i] += p * v[vb + j * kv_width + kLanes * i];
      }
    }
    barrier();  // the weights read before the next tile's scores overwrite them
  }

  lane_sums[tid] = lane_sum;
  barrier();
  float total = 0.0;
  for (uint l = 0u; l < kLanes; ++l) total += lane_sums[r * kLanes + l];
  if (r < n_rows) {
    const uint ob = pc.off[3] + (q_first + row0 + r) * width + h * hd;
    for (uint i = 0u; i < kMaxDims; ++i) {
      const uint d = lane + kLanes * i;
      if (d >= hd) break;
      o[ob + d] = acc[i] / total;
    }
  }
}
