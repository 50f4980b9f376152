/* The responder's PSN tracking window: a circular bitmap indexed by psn & (size - 1).
 * Because size divides 2^24, that index stays consistent across the 24-bit wrap. */
#include "mrc_psnwin.h"

uint32_t mrc_psn_add(uint32_t a, int64_t n) {
    return (uint32_t)((a + (uint64_t)n) & MRC_PSN_MASK);
}

int32_t mrc_psn_diff(uint32_t a, uint32_t b) {
    return (int32_t)((a - b + MRC_PSN_HALF) & MRC_PSN_MASK) - MRC_PSN_HALF;
}

int mrc_psn_lt(uint32_t a, uint32_t b) {
    return mrc_psn_diff(a, b) < 0;
}

int mrc_psnwin_init(mrc_psnwin_t *w, uint64_t *bits, size_t nwords, uint32_t size,
                    uint32_t start_psn) {
    if (w == NULL || bits == NULL || size < MRC_PSNWIN_MIN || size > MRC_PSNWIN_MAX ||
        (size & (size - 1)) != 0 || nwords != size / 64 || start_psn > MRC_PSN_MASK) {
        return MRC_PSNWIN_ERR_ARG;
    }
    for (size_t i = 0; i < nwords; i++) {
        bits[i] = 0;
    }
    w->bits = bits;
    w->size = size;
    w->mask = size - 1;
    w->expected = start_psn;
    w->highest = (start_psn - 1) & MRC_PSN_MASK;
    w->nset = 0;
    return MRC_PSNWIN_OK;
}

int mrc_psnwin_mark(mrc_psnwin_t *w, uint32_t psn) {
    if (psn > MRC_PSN_MASK) {
        return MRC_MARK_ERR_PSN;
    }
    uint32_t d = (psn - w->expected) & MRC_PSN_MASK;
    if (d >= MRC_PSN_HALF) {
        return MRC_MARK_DUP; /* behind the cumulative ack */
    }
    if (d >= w->size) {
        return MRC_MARK_OOR;
    }
    uint32_t idx = psn & w->mask;
    uint64_t bit = 1ULL << (idx & 63);
    uint64_t *word = &w->bits[idx >> 6];
    if (*word & bit) {
        return MRC_MARK_DUP;
    }
    *word |= bit;
    w->nset++;
    /* highest lies in [expected - 1, expected + size): span = highest - expected + 1 */
    if (d >= ((w->highest - w->expected + 1) & MRC_PSN_MASK)) {
        w->highest = psn;
    }
    return MRC_MARK_NEW;
}

int mrc_psnwin_test(const mrc_psnwin_t *w, uint32_t psn) {
    if (psn > MRC_PSN_MASK) {
        return MRC_MARK_ERR_PSN;
    }
    uint32_t d = (psn - w->expected) & MRC_PSN_MASK;
    if (d >= MRC_PSN_HALF) {
        return 1;
    }
    if (d >= w->size) {
        return 0;
    }
    uint32_t idx = psn & w->mask;
    return (int)((w->bits[idx >> 6] >> (idx & 63)) & 1u);
}

uint32_t mrc_psnwin_advance(mrc_psnwin_t *w) {
    uint32_t moved = 0;
    while (w->nset > 0) {
        uint32_t idx = w->expected & w->mask;
        uint32_t wi = idx >> 6, sh = idx & 63;
        uint64_t x = w->bits[wi] >> sh; /* top sh bits are 0, so ~x != 0 unless sh == 0 */
        uint32_t n = (~x == 0) ? 64 : (uint32_t)__builtin_ctzll(~x);
        if (n == 0) {
            break;
        }
        w->bits[wi] &= (n == 64) ? 0 : ~(((1ULL << n) - 1) << sh);
        moved += n;
        w->nset -= n;
        w->expected = (w->expected + n) & MRC_PSN_MASK;
        if (n < 64 - sh) {
            break; /* stopped at a hole inside this word */
        }
    }
    return moved;
}

uint64_t mrc_psnwin_sack_bitmap(const mrc_psnwin_t *w, uint32_t offset) {
    if (offset >= w->size) {
        return 0;
    }
    uint32_t idx = (w->expected + offset) & w->mask;
    uint32_t wi = idx >> 6, sh = idx & 63;
    uint32_t nwords = w->size / 64;
    uint64_t v = w->bits[wi] >> sh;
    if (sh != 0) {
        v |= w->bits[(wi + 1) & (nwords - 1)] << (64 - sh);
    }
    uint32_t valid = w->size - offset; /* bits past the window's end wrap onto its start */
    if (valid < 64) {
        v &= (1ULL << valid) - 1;
    }
    return v;
}

uint32_t mrc_psnwin_holes(const mrc_psnwin_t *w) {
    uint32_t span = (w->highest - w->expected + 1) & MRC_PSN_MASK; /* 0 when highest == cack */
    return span - w->nset;
}
