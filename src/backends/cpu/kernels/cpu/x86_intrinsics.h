// <immintrin.h> for the files that compile regions for AVX-512 and AMX. GCC 12 reports
// -Wuninitialized inside its own AVX-512 intrinsics, which start from an undefined vector (GCC bug
// 105593): silenced for the header's lines only. Include before any target region.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
