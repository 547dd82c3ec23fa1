// Shared tiling parameters and helpers for the example kernels.
#pragma once
#include <cuda_fp16.h>

#ifndef TILE
#define TILE 16
#endif

// Loads one element of a row-major half matrix, or zero outside its bounds.
__device__ __forceinline__ half load_or_zero(const half* m, int rows, int cols, int r, int c) {
    return (r < rows && c < cols) ? m[r * cols + c] : __float2half(0.0f);
}
