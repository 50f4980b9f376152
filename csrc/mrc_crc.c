/* CRC-32 for the ICRC (see mrc_crc.h). */
#include "mrc_crc.h"

#ifdef MRC_HAVE_LIBDEFLATE
/* libdeflate.h's declaration: the runtime library is linked by file name, so the build needs
 * no -dev package */
uint32_t libdeflate_crc32(uint32_t crc, const void *buf, size_t len);

static uint32_t crc32_lib(uint32_t crc, const uint8_t *buf, size_t len) {
    return libdeflate_crc32(crc, buf, len);
}

int mrc_crc32_libdeflate(void) { return 1; }
#else
#include <zlib.h>

static uint32_t crc32_lib(uint32_t crc, const uint8_t *buf, size_t len) {
    return (uint32_t)crc32_z(crc, buf, len);
}

int mrc_crc32_libdeflate(void) { return 0; }
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MRC_CRC_X86 1
#include "mrc_simd.inc"

/* Carry-less folding (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ",
 * 2009) on 512-bit registers: four of them take 256 bytes a step, each 128-bit lane folded
 * forward by D bits as lo * K(D + 32) ^ hi * K(D - 32), where K(n) is x^n mod P bit-reflected
 * and shifted left by one (P the CRC-32 polynomial 0x104C11DB7; tests/unit/test_tx_engine.py
 * derives them again). The Debian libdeflate (1.14) folds 128 bits a step: this is about
 * 3x as fast over a data frame. */
static const uint64_t K2080 = 0x11542778a, K2016 = 0x1322d1430; /* D = 2048: 4 registers */
static const uint64_t K544 = 0x154442bd4, K480 = 0x1c6e41596;   /* D = 512: one register */
static const uint64_t K416 = 0x3db1ecdc, K352 = 0x174359406;    /* D = 384, 256, 128: lanes */
static const uint64_t K288 = 0xf1da05aa, K224 = 0x15a546366;
static const uint64_t K160 = 0x1751997d0, K96 = 0xccaa009e;
static const uint64_t K64 = 0x163cd6124;                        /* 64 -> 32 bits */
static const uint64_t POLY = 0x1db710641, MU = 0x1f7011641;     /* Barrett: P, x^64 / P */

#define CRC_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))

CRC_TARGET static inline __m512i fold512(__m512i z, __m512i k, __m512i data) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(z, k, 0x00),
                                     _mm512_clmulepi64_epi128(z, k, 0x11), data, 0x96);
}

CRC_TARGET static inline __m128i fold128(__m128i x, uint64_t k_lo, uint64_t k_hi) {
    __m128i k = _mm_set_epi64x((long long)k_hi, (long long)k_lo);
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* The raw (not inverted) CRC of n bytes, n a multiple of 64 and at least 256. */
CRC_TARGET static uint32_t crc32_vpclmul(uint32_t crc, const uint8_t *p, size_t n) {
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K2016, (long long)K2080));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)K480, (long long)K544));
    __m512i first = _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)crc), 0);
    __m512i z0 = _mm512_xor_si512(_mm512_loadu_si512(p), first);
    __m512i z1 = _mm512_loadu_si512(p + 64);
    __m512i z2 = _mm512_loadu_si512(p + 128);
    __m512i z3 = _mm512_loadu_si512(p + 192);
    p += 256;
    n -= 256;
    for (; n >= 256; p += 256, n -= 256) {
        z0 = fold512(z0, k2048, _mm512_loadu_si512(p));
        z1 = fold512(z1, k2048, _mm512_loadu_si512(p + 64));
        z2 = fold512(z2, k2048, _mm512_loadu_si512(p + 128));
        z3 = fold512(z3, k2048, _mm512_loadu_si512(p + 192));
    }
    z1 = fold512(z0, k512, z1);
    z2 = fold512(z1, k512, z2);
    z3 = fold512(z2, k512, z3);
    for (; n >= 64; p += 64, n -= 64) {
        z3 = fold512(z3, k512, _mm512_loadu_si512(p));
    }
    /* the four lanes into one: lane i is (3 - i) x 128 bits ahead of the last */
    __m128i x = _mm_xor_si128(fold128(_mm512_extracti32x4_epi32(z3, 0), K416, K352),
                              fold128(_mm512_extracti32x4_epi32(z3, 1), K288, K224));
    x = _mm_xor_si128(x, fold128(_mm512_extracti32x4_epi32(z3, 2), K160, K96));
    x = _mm_xor_si128(x, _mm512_extracti32x4_epi32(z3, 3));
    /* 128 -> 64 -> 32 bits, then Barrett (as Linux's crc32-pclmul_asm.S) */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    x = _mm_xor_si128(_mm_clmulepi64_si128(x, _mm_set_epi64x((long long)K96, 0), 0x10),
                      _mm_srli_si128(x, 8));
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), _mm_cvtsi64_si128((long long)K64), 0x00);
    x = _mm_xor_si128(_mm_srli_si128(x, 4), t);
    const __m128i ru = _mm_set_epi64x((long long)MU, (long long)POLY);
    t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), ru, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), ru, 0x00);
    x = _mm_xor_si128(x, t);
    return (uint32_t)_mm_extract_epi32(x, 1);
}

static int simd_on = -1; /* -1: not yet asked of the CPU */
#endif

int mrc_crc32_simd(int on) {
#ifdef MRC_CRC_X86
    return simd_switch(&simd_on, on,
                       __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
                           __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"));
#else
    (void)on;
    return 0;
#endif
}

uint32_t mrc_crc32(uint32_t crc, const uint8_t *buf, size_t len) {
#ifdef MRC_CRC_X86
    int simd = __atomic_load_n(&simd_on, __ATOMIC_RELAXED);
    if (len >= 256 && (simd > 0 || (simd < 0 && mrc_crc32_simd(-1)))) {
        size_t n = len & ~(size_t)63;
        crc = ~crc32_vpclmul(~crc, buf, n);
        buf += n;
        len -= n;
    }
#endif
    return crc32_lib(crc, buf, len);
}
