/*
 * Deterministic random numbers: splitmix64 to derive streams from (seed, name) and xoshiro256** to draw.
 * A stream depends only on its seed, so e.g. each parameter tensor draws its init from a stream keyed
 * by its name: adding a tensor never changes the values of the others.
 */
#ifndef SEQ_RNG_H
#define SEQ_RNG_H

#include <stdint.h>

typedef struct Rng {
    uint64_t s[4];
} Rng;

uint64_t splitmix64(uint64_t *state);
uint64_t hash_str64(const char *s);            // FNV-1a then splitmix finaliser
void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
double rng_uniform(Rng *r);                    // [0, 1), 53 bits
double rng_normal(Rng *r);                     // N(0, 1), Box-Muller in double

#endif
