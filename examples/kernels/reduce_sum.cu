// Sums n floats into *out: each block reduces its slice in shared memory, then adds it atomically.
// Launch with 256 threads per block and *out zeroed.
extern "C" __global__ void reduce_sum(const float* in, float* out, unsigned n) {
    __shared__ float partial[256];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x * 2 + tid;
    float v = 0.0f;
    if (i < n) v += in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    partial[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, partial[0]);
}
