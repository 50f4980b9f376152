/* Zeroed memory for the shells' C state (see mrc_mem.h). Blocks of 64 KiB and more are
 * mapped straight from the kernel: calloc may take them from the heap and clear them byte by
 * byte (glibc raises its mmap threshold after big frees), which makes every page resident.
 * Each block starts with a 64-byte header holding its mapping's size (0: from calloc). */
#include "mrc_mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

enum { HDR = 64, BIG = 1 << 16 };

void *mrc_mem_zalloc(size_t n) {
    size_t total = n + HDR;
    uint8_t *p;
    if (total < n) {
        return NULL;
    }
    if (total >= BIG) {
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            return NULL;
        }
        *(size_t *)p = total;
    } else {
        p = calloc(1, total);
        if (p == NULL) {
            return NULL;
        }
        *(size_t *)p = 0;
    }
    return p + HDR;
}

void mrc_mem_free(void *q) {
    if (q == NULL) {
        return;
    }
    uint8_t *p = (uint8_t *)q - HDR;
    size_t total = *(size_t *)p;
    if (total) {
        munmap(p, total);
    } else {
        free(p);
    }
}
