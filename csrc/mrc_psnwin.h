#ifndef MRC_PSNWIN_H
#define MRC_PSNWIN_H
#include <stddef.h>
#include <stdint.h>

/* 24-bit PSN arithmetic (serial-number comparison over 2^24). */
enum { MRC_PSN_MASK = 0xFFFFFF, MRC_PSN_HALF = 0x800000 };
uint32_t mrc_psn_add(uint32_t a, int64_t n);
int32_t mrc_psn_diff(uint32_t a, uint32_t b); /* a - b in [-2^23, 2^23) */
int mrc_psn_lt(uint32_t a, uint32_t b);

/* The responder's PSN tracking window. The caller allocates the struct and the bitmap
 * (size / 64 words, zeroed); C never allocates. Bit (psn & (size - 1)) of the circular
 * bitmap is set iff psn was received and lies in [expected, expected + size). */
typedef struct mrc_psnwin {
    uint64_t *bits;
    uint32_t size;     /* power of two, MRC_PSNWIN_MIN..MRC_PSNWIN_MAX */
    uint32_t mask;     /* size - 1 */
    uint32_t expected; /* cack_psn + 1 */
    uint32_t highest;  /* highest PSN marked so far (cack_psn if none beyond) */
    uint32_t nset;     /* bits set: PSNs received beyond the cumulative ack */
} mrc_psnwin_t;

enum { MRC_PSNWIN_MIN = 64, MRC_PSNWIN_MAX = 4194304 };
enum { MRC_PSNWIN_OK = 0, MRC_PSNWIN_ERR_ARG = -1 };
enum { MRC_MARK_NEW = 0, MRC_MARK_DUP = 1, MRC_MARK_OOR = 2, MRC_MARK_ERR_PSN = -1 };

/* Returns MRC_PSNWIN_ERR_ARG unless size is a power of two in range, nwords == size / 64,
 * start_psn <= MRC_PSN_MASK and the pointers are non-NULL. Clears the bitmap. */
int mrc_psnwin_init(mrc_psnwin_t *w, uint64_t *bits, size_t nwords, uint32_t size,
                    uint32_t start_psn);
/* MRC_MARK_NEW / _DUP (seen, or behind the cumulative ack by up to 2^23) / _OOR (at or beyond
 * expected + size; not recorded) / _ERR_PSN (psn > MRC_PSN_MASK). */
int mrc_psnwin_mark(mrc_psnwin_t *w, uint32_t psn);
/* 1 received (or behind the cumulative ack), 0 not, MRC_MARK_ERR_PSN for psn > MRC_PSN_MASK. */
int mrc_psnwin_test(const mrc_psnwin_t *w, uint32_t psn);
/* Moves the cumulative ack past every contiguous received PSN; returns how many. */
uint32_t mrc_psnwin_advance(mrc_psnwin_t *w);
/* Bit i set iff PSN expected + offset + i was received (0 beyond the window). */
uint64_t mrc_psnwin_sack_bitmap(const mrc_psnwin_t *w, uint32_t offset);
/* PSNs missing in [expected, highest]. */
uint32_t mrc_psnwin_holes(const mrc_psnwin_t *w);
#endif
