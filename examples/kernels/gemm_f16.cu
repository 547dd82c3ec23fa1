// C = A * B for row-major half matrices (A: m x k, B: k x n), accumulated in float, tiled in
// shared memory. Launch with TILE x TILE threads per block.
#include "tile.cuh"

extern "C" __global__ void gemm_f16(const half* a, const half* b, half* c, int m, int n, int k) {
    __shared__ half ta[TILE][TILE];
    __shared__ half tb[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (k + TILE - 1) / TILE; ++t) {
        ta[threadIdx.y][threadIdx.x] = load_or_zero(a, m, k, row, t * TILE + threadIdx.x);
        tb[threadIdx.y][threadIdx.x] = load_or_zero(b, k, n, t * TILE + threadIdx.y, col);
        __syncthreads();
        for (int i = 0; i < TILE; ++i) {
            acc += __half2float(ta[threadIdx.y][i]) * __half2float(tb[i][threadIdx.x]);
        }
        __syncthreads();
    }
    if (row < m && col < n) {
        c[row * n + col] = __float2half(acc);
    }
}
