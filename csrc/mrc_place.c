/* Out-of-order direct placement into a registered region, bounds-checked before any write. */
#include "mrc_place.h"

#include <string.h>

int mrc_place(uint8_t *region, size_t region_len, uint64_t base_va, uint64_t va,
              const uint8_t *payload, size_t payload_len) {
    if (va < base_va) {
        return MRC_PLACE_ERR_BOUNDS;
    }
    /* work with the offset, never va + len, so nothing can overflow */
    uint64_t off = va - base_va;
    if (off > region_len || payload_len > region_len - off) {
        return MRC_PLACE_ERR_BOUNDS;
    }
    if (payload_len > 0) {
        if (region == NULL || payload == NULL) {
            return MRC_PLACE_ERR_BOUNDS;
        }
        memcpy(region + off, payload, payload_len);
    }
    return MRC_PLACE_OK;
}
