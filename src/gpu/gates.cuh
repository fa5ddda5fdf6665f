/*
 * The gates' scalar maps on the device: mixers/mixer_kit.h's sigmoid, log-sigmoid and softplus with the same
 * formulas in double (the decay and input gates of the linear family are formed in double on the host and rounded
 * to float once; the GPU does the same, so a gate differs from the host's by at most the last bit of a double
 * exp/log1p). Device code only.
 */
#ifndef SEQ_GPU_GATES_CUH
#define SEQ_GPU_GATES_CUH

// 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below
static __device__ __forceinline__ double gate_sigmoid_(double x) {
    double z = exp(-fabs(x));
    return (x >= 0 ? 1.0 : z) / (1.0 + z);
}
// log sigmoid(x) = min(x, 0) - log(1 + e^-|x|); its derivative is sigmoid(-x)
static __device__ __forceinline__ double gate_logsigmoid_(double x) { return fmin(x, 0.0) - log1p(exp(-fabs(x))); }
// log(1 + e^x), x itself above 30
static __device__ __forceinline__ double gate_softplus_(double x) { return x > 30.0 ? x : log1p(exp(x)); }

#endif
