#ifndef MRC_PLACE_H
#define MRC_PLACE_H
#include <stddef.h>
#include <stdint.h>

enum { MRC_PLACE_OK = 0, MRC_PLACE_ERR_BOUNDS = -1 };

/* Out-of-order direct placement: copy payload to region[va - base_va ...]. Returns
 * MRC_PLACE_ERR_BOUNDS, writing nothing, if any byte would fall outside the region
 * (va < base_va, va beyond the region, or va + payload_len past its end). A zero-length
 * payload is accepted for va in [base_va, base_va + region_len]. */
int mrc_place(uint8_t *region, size_t region_len, uint64_t base_va, uint64_t va,
              const uint8_t *payload, size_t payload_len);
#endif
