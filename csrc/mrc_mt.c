/* Python's random.Random in C (see mrc_mt.h): CPython's _randommodule.c algorithm. */
#include "mrc_mt.h"

uint32_t mrc_mt_next(uint32_t *mt, uint32_t *mti) {
    if (*mti >= 624) {
        static const uint32_t mag01[2] = {0x0u, 0x9908b0dfu};
        int kk;
        uint32_t y;
        for (kk = 0; kk < 624 - 397; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + 397] ^ (y >> 1) ^ mag01[y & 1u];
        }
        for (; kk < 623; kk++) {
            y = (mt[kk] & 0x80000000u) | (mt[kk + 1] & 0x7fffffffu);
            mt[kk] = mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1u];
        }
        y = (mt[623] & 0x80000000u) | (mt[0] & 0x7fffffffu);
        mt[623] = mt[396] ^ (y >> 1) ^ mag01[y & 1u];
        *mti = 0;
    }
    uint32_t y = mt[(*mti)++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
}

double mrc_mt_random(uint32_t *mt, uint32_t *mti) {
    uint32_t a = mrc_mt_next(mt, mti) >> 5;
    uint32_t b = mrc_mt_next(mt, mti) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}
