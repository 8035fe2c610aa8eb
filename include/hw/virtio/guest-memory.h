/*
 * Guest memory as the vhost-user front-end shares it: regions of a memfd (or
 * other fd) that the back-end maps, each known by its guest physical address
 * (GPA) and by the front-end's own virtual address (QVA, used by
 * SET_VRING_ADDR).
 *
 * A GuestMemory is immutable once built: a change of the table (SET_MEM_TABLE,
 * ADD_MEM_REG, REM_MEM_REG) builds a new one, hands it to every running queue
 * (in its IOThread) and only then drops the old one.  So the data path reads
 * the table without locks.  Mappings are reference counted: a region that
 * survives a change is not remapped.
 *
 * Every translation checks bounds, including overflow of addr + len: guest
 * input is untrusted.  Threads: build/modify in the main thread; translate
 * from any thread holding a reference.
 */
#ifndef SPINDLE_HW_VIRTIO_GUEST_MEMORY_H
#define SPINDLE_HW_VIRTIO_GUEST_MEMORY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include "util/error.h"

/* Slots advertised by GET_MAX_MEM_SLOTS. */
#define GUEST_MEMORY_MAX_SLOTS 509

typedef struct GuestMemMapping GuestMemMapping;   /* one mmap, refcounted */

typedef struct GuestMemRegion {
    uint64_t gpa;            /* guest physical address */
    uint64_t size;
    uint64_t qva;            /* front-end's userspace address */
    uint64_t mmap_offset;    /* offset of the region in the fd */
    uint8_t *host;           /* where gpa maps in our address space */
    GuestMemMapping *mapping;
} GuestMemRegion;

typedef struct GuestMemory {
    _Atomic int refcnt;
    unsigned nregions;
    GuestMemRegion regions[];   /* sorted by gpa, non-overlapping */
} GuestMemory;

/* The region description of one vhost-user memory region message. */
typedef struct GuestMemRegionDesc {
    uint64_t gpa;
    uint64_t size;
    uint64_t qva;
    uint64_t mmap_offset;
} GuestMemRegionDesc;

/*
 * Whether [offset, offset + size) lies inside fd's file (no overflow),
 * for shared memory a front-end sends: mapping past the end would fault
 * at the first access.  fds that are not regular files are not checked.
 * false with errp set ("WHAT of N bytes at fd offset ... runs past the
 * end of its file") if not.  Any thread.
 */
bool guest_memory_fd_holds(int fd, uint64_t offset, uint64_t size,
                           const char *what, Error **errp);

/*
 * Shared memory a front-end hands over for the device's own bookkeeping
 * (the inflight region, the dirty log), mapped read-write and reference
 * counted.  An object embeds one as its first member; shared_mapping_ref()
 * and shared_mapping_unref() then take and drop references on the object
 * (NULL is fine), and the last unref unmaps the memory and g_free()s the
 * object.  Any thread.
 */
typedef struct SharedMapping {
    _Atomic int refcnt;
    void *addr;                  /* what mmap() returned */
    size_t len;
} SharedMapping;

/*
 * Map size bytes of fd from offset (any offset: the mapping starts at the
 * page below it) into m, holding one reference.  Returns where the byte at
 * offset landed, or NULL with errp set ("WHAT: cannot map ...").  The
 * caller checks first that the range lies inside fd's file
 * (guest_memory_fd_holds()).
 */
uint8_t *shared_mapping_map(SharedMapping *m, int fd, uint64_t offset,
                            uint64_t size, const char *what, Error **errp);
void *shared_mapping_ref(void *obj);
void shared_mapping_unref(void *obj);

/* An empty table. */
GuestMemory *guest_memory_new_empty(void);

/*
 * A new table: old's regions (may be NULL) plus desc mapped from fd (the
 * fd is not kept; the mapping is).  Errors: zero size, overflow, overlap
 * with an existing region, too many regions, mmap failure.
 */
GuestMemory *guest_memory_add(const GuestMemory *old,
                              const GuestMemRegionDesc *desc, int fd,
                              Error **errp);

/* A new table without the region matching desc (gpa, size, qva). */
GuestMemory *guest_memory_remove(const GuestMemory *old,
                                 const GuestMemRegionDesc *desc, Error **errp);

GuestMemory *guest_memory_ref(GuestMemory *mem);
void guest_memory_unref(GuestMemory *mem);     /* unmaps what nobody uses */

/*
 * Host pointer for [gpa, gpa + len) if it lies within one region, else
 * NULL.  len 0 is valid (any gpa inside a region).
 */
void *guest_memory_gpa_to_host(const GuestMemory *mem, uint64_t gpa,
                               uint64_t len);

/* The same for a front-end virtual address (vring addresses). */
void *guest_memory_qva_to_host(const GuestMemory *mem, uint64_t qva,
                               uint64_t len);

/*
 * Map [gpa, gpa + len) into iovecs, splitting at region boundaries.
 * Appends to iov[*niov..max); returns 0, -EFAULT if any byte is outside
 * guest memory, -ENOBUFS if more than max iovecs would be needed.
 */
int guest_memory_map_iov(const GuestMemory *mem, uint64_t gpa, uint64_t len,
                         struct iovec *iov, unsigned *niov, unsigned max);

#endif
