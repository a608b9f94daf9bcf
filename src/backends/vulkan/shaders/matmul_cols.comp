#version 450
// Matmul for decode and short steps: tiles of 1 row of x by 8 weight rows (matmul.glsl).
#define ROWS 1u
#define COLS 8u
#include "matmul.glsl"
