/* Philox4x32-10; the rounds live in numerics.h so that CUDA kernels run the same code. */
#include "philox.h"

#include "numerics.h"

void qk_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    qk_philox4x32_10_core(ctr, key, out);
}

uint32_t qk_sr_bits(uint64_t seed, uint32_t tensor_id, uint32_t step, uint64_t index) {
    return qk_sr_bits_core(seed, tensor_id, step, index);
}
