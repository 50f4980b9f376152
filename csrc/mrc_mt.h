#ifndef MRC_MT_H
#define MRC_MT_H
#include <stdint.h>
/* Python's random.Random in C: its Mersenne Twister, loaded from random.Random.getstate()
 * (624 words and the index), so C draws exactly what the Python twin would. */

/* The next 32-bit output (random.getrandbits(32)); mt: 624 words, *mti: the index. */
uint32_t mrc_mt_next(uint32_t *mt, uint32_t *mti);

/* random.random(): 53 bits from two outputs, in [0, 1). */
double mrc_mt_random(uint32_t *mt, uint32_t *mti);
#endif
