/*
 * vu-guest-mem: the guest memory of a vu-frontend and its allocator
 * (vu-guest-mem.c).
 */
#ifndef SPINDLE_TOOLS_VU_GUEST_MEM_H
#define SPINDLE_TOOLS_VU_GUEST_MEM_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* Guest memory (thread-safe)                                                */

void *vuf_mem_base(const VuFrontend *fe);
uint64_t vuf_mem_size(const VuFrontend *fe);

/*
 * Allocate size bytes of guest memory aligned to align (a power of two, 0
 * means 64).  Returns the host pointer and stores the guest address in *gpa
 * (may be NULL); NULL when the memory is exhausted.  The memory is not
 * cleared.  Free with vuf_mem_free().
 */
void *vuf_mem_alloc(VuFrontend *fe, size_t size, size_t align, uint64_t *gpa);
void vuf_mem_free(VuFrontend *fe, void *ptr);
/* Bytes not allocated (fragmentation not accounted for). */
uint64_t vuf_mem_available(VuFrontend *fe);

/* Guest address of a host pointer inside the memory. */
uint64_t vuf_gpa(const VuFrontend *fe, const void *hva);
/* Host pointer for [gpa, gpa+len), or NULL if outside the memory. */
void *vuf_hva(const VuFrontend *fe, uint64_t gpa, uint64_t len);

#endif
