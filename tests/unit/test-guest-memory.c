/*
 * Unit tests for the guest memory table (hw/virtio/guest-memory.c).
 *
 * Theory of operation: each test builds tables from a memfd whose bytes
 * hold a known pattern (byte at fd offset o is pattern_byte(o)), so a host
 * pointer returned by a translation can be checked by what it reads.
 * The tests cover building (sorted insertion, the slack of an unaligned
 * fd offset, every error), removal, GPA and front-end address
 * translation at and across region boundaries, splitting into iovecs,
 * and the reference counting that keeps surviving regions mapped (and
 * unmaps the others, which mincore() can tell).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/guest-memory.h"
#include "test-helpers.h"

#define KiB 1024ULL
#define MiB (1024 * KiB)

static uint8_t pattern_byte(uint64_t fd_offset)
{
    return (uint8_t)(fd_offset * 7 + (fd_offset >> 8) * 13 + 1);
}

/* A memfd of size bytes filled with the pattern. */
static int memfd_new(size_t size)
{
    int fd = memfd_create("test-guest-memory", MFD_CLOEXEC);
    uint8_t *p;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert(p != MAP_FAILED);
    for (size_t i = 0; i < size; i++) {
        p[i] = pattern_byte(i);
    }
    munmap(p, size);
    return fd;
}

static GuestMemory *add_ok(GuestMemory *old, uint64_t gpa, uint64_t size,
                           uint64_t qva, uint64_t off, int fd)
{
    GuestMemRegionDesc d = { .gpa = gpa, .size = size, .qva = qva,
                             .mmap_offset = off };
    Error *err = NULL;
    GuestMemory *mem = guest_memory_add(old, &d, fd, &err);

    g_assert_no_error(err);
    g_assert_nonnull(mem);
    guest_memory_unref(old);
    return mem;
}

/* Adding must fail with a message containing what. */
static void add_fails(GuestMemory *old, uint64_t gpa, uint64_t size,
                      uint64_t qva, uint64_t off, int fd, const char *what)
{
    GuestMemRegionDesc d = { .gpa = gpa, .size = size, .qva = qva,
                             .mmap_offset = off };
    Error *err = NULL;

    g_assert_null(guest_memory_add(old, &d, fd, &err));
    g_assert_nonnull(err);
    if (!strstr(error_get_pretty(err), what)) {
        g_error("message \"%s\" does not contain \"%s\"",
                error_get_pretty(err), what);
    }
    error_free(err);
}

/* The host pointer for gpa reads the pattern of fd offset off. */
static void assert_maps_to(const GuestMemory *mem, uint64_t gpa, uint64_t off)
{
    uint8_t *p = guest_memory_gpa_to_host(mem, gpa, 1);

    g_assert_nonnull(p);
    g_assert_cmpuint(*p, ==, pattern_byte(off));
}

static bool page_is_mapped(const void *p)
{
    long page = sysconf(_SC_PAGESIZE);
    void *base = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));
    unsigned char vec;

    if (mincore(base, page, &vec) == 0) {
        return true;
    }
    g_assert_cmpint(errno, ==, ENOMEM);
    return false;
}

/* ------------------------------------------------------------------------ */

static void test_empty(void)
{
    GuestMemory *mem = guest_memory_new_empty();
    struct iovec iov[2];
    unsigned niov = 0;

    g_assert_cmpuint(mem->nregions, ==, 0);
    g_assert_null(guest_memory_gpa_to_host(mem, 0, 0));
    g_assert_null(guest_memory_qva_to_host(mem, 0, 0));
    g_assert_cmpint(guest_memory_map_iov(mem, 0, 1, iov, &niov, 2), ==,
                    -EFAULT);
    /* Nothing to map is not an error. */
    g_assert_cmpint(guest_memory_map_iov(mem, 0, 0, iov, &niov, 2), ==, 0);
    g_assert_cmpuint(niov, ==, 0);
    g_assert(guest_memory_ref(mem) == mem);
    guest_memory_unref(mem);
    guest_memory_unref(mem);
    guest_memory_unref(NULL);
}

static void test_add_sorted(void)
{
    int fd = memfd_new(256 * KiB);
    GuestMemory *mem = guest_memory_new_empty();

    /* Added out of GPA order, from different fd offsets. */
    mem = add_ok(mem, 0x200000, 64 * KiB, 0x7000000, 128 * KiB, fd);
    mem = add_ok(mem, 0x0, 64 * KiB, 0x5000000, 0, fd);
    mem = add_ok(mem, 0x100000, 64 * KiB, 0x6000000, 64 * KiB, fd);
    g_assert_cmpuint(mem->nregions, ==, 3);
    g_assert_cmphex(mem->regions[0].gpa, ==, 0x0);
    g_assert_cmphex(mem->regions[1].gpa, ==, 0x100000);
    g_assert_cmphex(mem->regions[2].gpa, ==, 0x200000);
    assert_maps_to(mem, 0x0, 0);
    assert_maps_to(mem, 0x1234, 0x1234);
    assert_maps_to(mem, 0x100000, 64 * KiB);
    assert_maps_to(mem, 0x10ffff, 128 * KiB - 1);
    assert_maps_to(mem, 0x200010, 128 * KiB + 0x10);
    assert_maps_to(mem, 0x20ffff, 192 * KiB - 1);

    /* Writes through the mapping reach the fd (MAP_SHARED). */
    *(uint8_t *)guest_memory_gpa_to_host(mem, 0x100001, 1) = 0xa5;
    {
        uint8_t b = 0;

        g_assert_cmpint(pread(fd, &b, 1, 64 * KiB + 1), ==, 1);
        g_assert_cmpuint(b, ==, 0xa5);
    }
    guest_memory_unref(mem);
    close(fd);
}

static void test_unaligned_offset(void)
{
    int fd = memfd_new(256 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    uint64_t off = 64 * KiB + 0x801;        /* not page-aligned */

    mem = add_ok(mem, 0x40000, 8 * KiB, 0x9000, off, fd);
    g_assert_cmphex(mem->regions[0].mmap_offset, ==, off);
    assert_maps_to(mem, 0x40000, off);
    assert_maps_to(mem, 0x40000 + 8 * KiB - 1, off + 8 * KiB - 1);
    g_assert_null(guest_memory_gpa_to_host(mem, 0x40000 + 8 * KiB, 1));
    /* Ending exactly at the end of the fd. */
    mem = add_ok(mem, 0x0, 4 * KiB - 3, 0x1000000, 252 * KiB + 3, fd);
    assert_maps_to(mem, 4 * KiB - 4, 256 * KiB - 1);
    guest_memory_unref(mem);
    close(fd);
}

static void test_add_errors(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    char path[64];
    int rofd;

    mem = add_ok(mem, 0x10000, 16 * KiB, 0x100000, 0, fd);

    add_fails(mem, 0x40000, 0, 0, 0, fd, "size 0");
    add_fails(mem, UINT64_MAX - 0xfff, 0x2000, 0, 0, fd, "wraps");
    add_fails(mem, UINT64_MAX - 0xfff, 0x1000, 0, 0, fd, "wraps");
    add_fails(mem, 0x40000, 0x2000, UINT64_MAX - 0xfff, 0, fd, "wraps");
    add_fails(mem, 0x40000, 0x2000, 0, UINT64_MAX - 0xfff, fd, "offset");
    add_fails(mem, 0x40000, 0x2000, 0, (uint64_t)INT64_MAX - 0xfff, fd,
              "offset");
    /* Overlaps: same, inside, straddling either end, around. */
    add_fails(mem, 0x10000, 16 * KiB, 0, 0, fd, "overlaps");
    add_fails(mem, 0x11000, 4 * KiB, 0, 0, fd, "overlaps");
    add_fails(mem, 0xf000, 8 * KiB, 0, 0, fd, "overlaps");
    add_fails(mem, 0x13fff, 8 * KiB, 0, 0, fd, "overlaps");
    add_fails(mem, 0x0, 1 * MiB, 0, 0, fd, "overlaps");
    add_fails(mem, 0x40000, 4 * KiB, 0, 0, -1, "file descriptor");
    /* Past the end of the 64 KiB file: mmap() would allow it, and the
     * first access there would be SIGBUS (tests/fuzz/fuzz-vhost-user). */
    add_fails(mem, 0x40000, 128 * KiB, 0, 0, fd, "past the end");
    add_fails(mem, 0x40000, 16 * KiB, 0, 56 * KiB, fd, "past the end");
    add_fails(mem, 0x40000, 4 * KiB, 0, 64 * KiB, fd, "past the end");

    /* mmap failure: a read-only fd cannot be mapped shared writable. */
    g_snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rofd = open(path, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(rofd, >=, 0);
    add_fails(mem, 0x40000, 4 * KiB, 0, 0, rofd, "cannot map");
    close(rofd);

    /* The table did not change; adjacent regions on both sides are fine. */
    g_assert_cmpuint(mem->nregions, ==, 1);
    mem = add_ok(mem, 0xc000, 16 * KiB, 0x200000, 16 * KiB, fd);
    mem = add_ok(mem, 0x14000, 16 * KiB, 0x300000, 32 * KiB, fd);
    g_assert_cmpuint(mem->nregions, ==, 3);
    /* The last page of the file is the last that may be mapped. */
    mem = add_ok(mem, 0x80000, 4 * KiB, 0x500000, 60 * KiB, fd);
    assert_maps_to(mem, 0x80000, 60 * KiB);
    g_assert_cmpuint(mem->nregions, ==, 4);
    /* A region near the top of the address space. */
    mem = add_ok(mem, UINT64_MAX - 0x1fff, 0x1000, 0x400000, 0, fd);
    assert_maps_to(mem, UINT64_MAX - 0x1000, 0xfff);
    g_assert_null(guest_memory_gpa_to_host(mem, UINT64_MAX - 0x1000, 2));
    g_assert_null(guest_memory_gpa_to_host(mem, UINT64_MAX - 0xfff, 1));
    g_assert_null(guest_memory_gpa_to_host(mem, UINT64_MAX, 1));
    guest_memory_unref(mem);
    close(fd);
}

static void test_max_slots(void)
{
    long page = sysconf(_SC_PAGESIZE);
    int fd = memfd_new(GUEST_MEMORY_MAX_SLOTS * page);
    GuestMemory *mem = guest_memory_new_empty();

    for (unsigned i = 0; i < GUEST_MEMORY_MAX_SLOTS; i++) {
        /* Every other page, so that none are adjacent. */
        mem = add_ok(mem, (uint64_t)i * 2 * page, page, 0x10000000 + i * page,
                     (uint64_t)i * page, fd);
    }
    g_assert_cmpuint(mem->nregions, ==, GUEST_MEMORY_MAX_SLOTS);
    add_fails(mem, (uint64_t)GUEST_MEMORY_MAX_SLOTS * 2 * page, page, 0, 0,
              fd, "too many");
    for (unsigned i = 0; i < GUEST_MEMORY_MAX_SLOTS; i += 50) {
        assert_maps_to(mem, (uint64_t)i * 2 * page + 5, (uint64_t)i * page + 5);
        g_assert_null(guest_memory_gpa_to_host(mem,
                                               (uint64_t)(i * 2 + 1) * page,
                                               1));
    }
    guest_memory_unref(mem);
    close(fd);
}

static void test_remove(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    GuestMemRegionDesc d = { .gpa = 0x10000, .size = 16 * KiB,
                             .qva = 0x200000 };
    GuestMemory *smaller;
    Error *err = NULL;

    mem = add_ok(mem, 0x0, 16 * KiB, 0x100000, 0, fd);
    mem = add_ok(mem, 0x10000, 16 * KiB, 0x200000, 16 * KiB, fd);
    mem = add_ok(mem, 0x20000, 16 * KiB, 0x300000, 32 * KiB, fd);

    /* Must match gpa, size and qva. */
    d.size = 8 * KiB;
    g_assert_null(guest_memory_remove(mem, &d, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(error_get_pretty(err), "no guest memory region"));
    g_clear_error(&err);
    d.size = 16 * KiB;
    d.qva = 0x200001;
    g_assert_null(guest_memory_remove(mem, &d, &err));
    g_clear_error(&err);
    d.qva = 0x200000;

    smaller = guest_memory_remove(mem, &d, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(smaller->nregions, ==, 2);
    g_assert_null(guest_memory_gpa_to_host(smaller, 0x10000, 1));
    assert_maps_to(smaller, 0x0, 0);
    assert_maps_to(smaller, 0x20000, 32 * KiB);
    /* The old table is untouched. */
    assert_maps_to(mem, 0x10000, 16 * KiB);
    guest_memory_unref(mem);

    /* Removing from an empty table. */
    mem = guest_memory_new_empty();
    g_assert_null(guest_memory_remove(mem, &d, &err));
    g_clear_error(&err);
    guest_memory_unref(mem);
    guest_memory_unref(smaller);
    close(fd);
}

static void test_gpa_boundaries(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    uint8_t *a, *b;

    /* [0x1000, 0x5000) and [0x5000, 0x9000) adjacent, then a gap. */
    mem = add_ok(mem, 0x1000, 16 * KiB, 0x100000, 0, fd);
    mem = add_ok(mem, 0x5000, 16 * KiB, 0x200000, 32 * KiB, fd);
    a = guest_memory_gpa_to_host(mem, 0x1000, 0);
    b = guest_memory_gpa_to_host(mem, 0x5000, 0);
    g_assert_nonnull(a);
    g_assert_nonnull(b);

    g_assert_null(guest_memory_gpa_to_host(mem, 0x0, 1));
    g_assert_null(guest_memory_gpa_to_host(mem, 0xfff, 1));
    g_assert_null(guest_memory_gpa_to_host(mem, 0xfff, 2));  /* straddles */
    g_assert(guest_memory_gpa_to_host(mem, 0x1000, 16 * KiB) == a);
    g_assert_null(guest_memory_gpa_to_host(mem, 0x1000, 16 * KiB + 1));
    g_assert(guest_memory_gpa_to_host(mem, 0x4fff, 1) == a + 0x3fff);
    /* Contiguous in GPA, but not in one region: no single pointer. */
    g_assert_null(guest_memory_gpa_to_host(mem, 0x4fff, 2));
    g_assert(guest_memory_gpa_to_host(mem, 0x8fff, 1) == b + 0x3fff);
    g_assert_null(guest_memory_gpa_to_host(mem, 0x9000, 0));
    g_assert_null(guest_memory_gpa_to_host(mem, 0x9000, 1));
    g_assert_null(guest_memory_gpa_to_host(mem, 0x8000, UINT64_MAX));
    g_assert_null(guest_memory_gpa_to_host(mem, UINT64_MAX, 1));
    g_assert_null(guest_memory_gpa_to_host(mem, 0x2000, UINT64_MAX - 0x1000));
    assert_maps_to(mem, 0x4fff, 0x3fff);
    assert_maps_to(mem, 0x5000, 32 * KiB);
    guest_memory_unref(mem);
    close(fd);
}

static void test_map_iov(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    struct iovec iov[4];
    unsigned niov;
    uint8_t *a, *b, *c;

    mem = add_ok(mem, 0x1000, 16 * KiB, 0x100000, 0, fd);
    mem = add_ok(mem, 0x5000, 16 * KiB, 0x200000, 32 * KiB, fd);
    mem = add_ok(mem, 0x9000, 4 * KiB, 0x300000, 16 * KiB, fd);
    a = guest_memory_gpa_to_host(mem, 0x1000, 0);
    b = guest_memory_gpa_to_host(mem, 0x5000, 0);
    c = guest_memory_gpa_to_host(mem, 0x9000, 0);

    /* Within one region: one iovec. */
    niov = 0;
    g_assert_cmpint(guest_memory_map_iov(mem, 0x1010, 0x100, iov, &niov, 4),
                    ==, 0);
    g_assert_cmpuint(niov, ==, 1);
    g_assert(iov[0].iov_base == a + 0x10);
    g_assert_cmpuint(iov[0].iov_len, ==, 0x100);

    /* Across three regions, appended after the first iovec. */
    g_assert_cmpint(guest_memory_map_iov(mem, 0x4ff0, 0x4020, iov, &niov, 4),
                    ==, 0);
    g_assert_cmpuint(niov, ==, 4);
    g_assert(iov[1].iov_base == a + 0x3ff0);
    g_assert_cmpuint(iov[1].iov_len, ==, 0x10);
    g_assert(iov[2].iov_base == b);
    g_assert_cmpuint(iov[2].iov_len, ==, 0x4000);
    g_assert(iov[3].iov_base == c);
    g_assert_cmpuint(iov[3].iov_len, ==, 0x10);

    /* Not enough iovecs: -ENOBUFS, nothing appended. */
    niov = 2;
    g_assert_cmpint(guest_memory_map_iov(mem, 0x4ff0, 0x4020, iov, &niov, 4),
                    ==, -ENOBUFS);
    g_assert_cmpuint(niov, ==, 2);
    niov = 0;
    g_assert_cmpint(guest_memory_map_iov(mem, 0x4ff0, 0x20, iov, &niov, 1),
                    ==, -ENOBUFS);
    g_assert_cmpuint(niov, ==, 0);

    /* Outside, past the end, into a gap, overflowing: -EFAULT. */
    g_assert_cmpint(guest_memory_map_iov(mem, 0x0, 1, iov, &niov, 4), ==,
                    -EFAULT);
    g_assert_cmpint(guest_memory_map_iov(mem, 0x9000, 0x1001, iov, &niov, 4),
                    ==, -EFAULT);
    g_assert_cmpint(guest_memory_map_iov(mem, 0x8800, 0x2000, iov, &niov, 4),
                    ==, -EFAULT);
    g_assert_cmpint(guest_memory_map_iov(mem, 0x1000, UINT64_MAX, iov, &niov,
                                         4), ==, -EFAULT);
    g_assert_cmpint(guest_memory_map_iov(mem, UINT64_MAX, 2, iov, &niov, 4),
                    ==, -EFAULT);
    g_assert_cmpuint(niov, ==, 0);

    /* Exactly to the end. */
    g_assert_cmpint(guest_memory_map_iov(mem, 0x9000, 0x1000, iov, &niov, 4),
                    ==, 0);
    g_assert_cmpuint(niov, ==, 1);
    g_assert_cmpuint(iov[0].iov_len, ==, 0x1000);
    guest_memory_unref(mem);
    close(fd);
}

static void test_qva(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemory *mem = guest_memory_new_empty();
    uint8_t *a, *b;

    /* QVA order opposite to GPA order. */
    mem = add_ok(mem, 0x0, 16 * KiB, 0x7f0000000000, 0, fd);
    mem = add_ok(mem, 0x10000, 16 * KiB, 0x100000, 16 * KiB, fd);
    a = guest_memory_gpa_to_host(mem, 0x0, 0);
    b = guest_memory_gpa_to_host(mem, 0x10000, 0);

    g_assert(guest_memory_qva_to_host(mem, 0x7f0000000000, 16 * KiB) == a);
    g_assert(guest_memory_qva_to_host(mem, 0x7f0000000010, 0x10) == a + 0x10);
    g_assert(guest_memory_qva_to_host(mem, 0x100000 + 0x3fff, 1) ==
             b + 0x3fff);
    g_assert_null(guest_memory_qva_to_host(mem, 0x100000 + 0x3fff, 2));
    g_assert_null(guest_memory_qva_to_host(mem, 0xfffff, 1));
    g_assert_null(guest_memory_qva_to_host(mem, 0x104000, 0));
    g_assert_null(guest_memory_qva_to_host(mem, 0x7f0000000000, UINT64_MAX));
    g_assert_null(guest_memory_qva_to_host(mem, UINT64_MAX, 1));
    /* A GPA is not a QVA. */
    g_assert_null(guest_memory_qva_to_host(mem, 0x10, 1));
    guest_memory_unref(mem);
    close(fd);
}

static void test_refcount(void)
{
    int fd = memfd_new(64 * KiB);
    GuestMemRegionDesc da = { .gpa = 0x0, .size = 16 * KiB, .qva = 0x100000 };
    GuestMemory *t1, *t2, *t3;
    Error *err = NULL;
    uint8_t *a, *b;

    t1 = add_ok(guest_memory_new_empty(), 0x0, 16 * KiB, 0x100000, 0, fd);
    a = guest_memory_gpa_to_host(t1, 0x0, 0);
    t2 = add_ok(guest_memory_ref(t1), 0x10000, 16 * KiB, 0x200000,
                32 * KiB, fd);
    b = guest_memory_gpa_to_host(t2, 0x10000, 0);
    /* The surviving region is not remapped. */
    g_assert(guest_memory_gpa_to_host(t2, 0x0, 0) == a);
    g_assert(t1->regions[0].mapping == t2->regions[0].mapping);
    g_assert(t1->regions[0].host == t2->regions[0].host);

    guest_memory_unref(t1);                 /* t2 still maps region a */
    g_assert(page_is_mapped(a));
    assert_maps_to(t2, 0x100, 0x100);

    t3 = guest_memory_remove(t2, &da, &err);
    g_assert_no_error(err);
    g_assert(guest_memory_gpa_to_host(t3, 0x10000, 0) == b);
    /* t2 (a queue still using it) keeps a mapped after the change. */
    g_assert(page_is_mapped(a));
    a[1] = 0x5a;
    guest_memory_unref(t2);                 /* last user of region a */
    g_assert_false(page_is_mapped(a));
    g_assert(page_is_mapped(b));
    assert_maps_to(t3, 0x10000, 32 * KiB);
    guest_memory_unref(t3);
    g_assert_false(page_is_mapped(b));
    {
        uint8_t v = 0;

        g_assert_cmpint(pread(fd, &v, 1, 1), ==, 1);
        g_assert_cmpuint(v, ==, 0x5a);
    }
    close(fd);
}

static const TestCase tests[] = {
    { "/guest-memory/empty", test_empty },
    { "/guest-memory/add-sorted", test_add_sorted },
    { "/guest-memory/unaligned-offset", test_unaligned_offset },
    { "/guest-memory/add-errors", test_add_errors },
    { "/guest-memory/max-slots", test_max_slots },
    { "/guest-memory/remove", test_remove },
    { "/guest-memory/gpa-boundaries", test_gpa_boundaries },
    { "/guest-memory/map-iov", test_map_iov },
    { "/guest-memory/qva", test_qva },
    { "/guest-memory/refcount", test_refcount },
};

TEST_MAIN(tests, 25)
