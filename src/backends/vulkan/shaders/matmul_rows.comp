#version 450
// Matmul for long prompts: tiles of 8 rows of x by 1 weight row (matmul.glsl).
#define ROWS 8u
#define COLS 1u
#include "matmul.glsl"
