#ifndef MRC_MEM_H
#define MRC_MEM_H
#include <stddef.h>
/* Zeroed memory for the shells' C state, through cffi's ffi.new_allocator
 * (mrcnic.transport.rx_engine.zeroed): calloc hands large blocks out as untouched zero pages,
 * so a QP's rings and records cost resident memory only as far as they are used (cffi's own
 * allocator clears every byte, which made all of them resident at once). Called when a QP's
 * engines are built, never per packet. */

/* n zeroed bytes, or NULL. */
void *mrc_mem_zalloc(size_t n);

/* Give back a block of mrc_mem_zalloc (NULL: nothing). */
void mrc_mem_free(void *p);
#endif
