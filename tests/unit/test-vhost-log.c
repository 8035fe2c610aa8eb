/*
 * Unit tests for dirty page logging (hw/virtio/vhost-log.c): the bitmap
 * arithmetic at page and byte boundaries, the size a memory table needs
 * (regions that are not page aligned too), and the checks of a log a
 * front-end sends (offsets, a file too short, a log too small for the
 * memory table).  Each log is a memfd mapped by the module; the tests
 * read the bits back through the fd, as the front-end would.
 */
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-log.h"
#include "test-helpers.h"

#define PAGE VHOST_LOG_PAGE

static int memfd_of(uint64_t size)
{
    int fd = memfd_create("test-vhost-log", MFD_CLOEXEC);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
    return fd;
}

/* A table of regions given as (gpa, size) pairs, each its own memfd. */
static GuestMemory *memory_of(const uint64_t (*regions)[2], unsigned n)
{
    GuestMemory *mem = guest_memory_new_empty();

    for (unsigned i = 0; i < n; i++) {
        GuestMemRegionDesc d = { .gpa = regions[i][0],
                                 .size = regions[i][1],
                                 .qva = 0x7f0000000000ull + regions[i][0] };
        int fd = memfd_of(regions[i][1]);
        GuestMemory *next = guest_memory_add(mem, &d, fd, NULL);

        g_assert_nonnull(next);
        close(fd);
        guest_memory_unref(mem);
        mem = next;
    }
    return mem;
}

/* Map a log that must be accepted. */
static VhostLog *map_ok(int fd, uint64_t size, uint64_t offset,
                        const GuestMemory *mem)
{
    Error *err = NULL;
    VhostLog *log = vhost_log_map(fd, size, offset, mem, &err);

    g_assert_no_error(err);
    g_assert_nonnull(log);
    return log;
}

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

static void test_bytes_for(void)
{
    static const uint64_t rows[][2] = {
        /* end, bytes */
        { 0, 0 },
        { 1, 1 },
        { PAGE, 1 },
        { PAGE + 1, 1 },
        { 8 * PAGE, 1 },
        { 8 * PAGE + 1, 2 },
        { 16 * PAGE, 2 },
        { 1ull << 30, (1ull << 30) / PAGE / 8 },
        { (1ull << 30) + 1, (1ull << 30) / PAGE / 8 + 1 },
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(rows); i++) {
        g_assert_cmpuint(vhost_log_bytes_for(rows[i][0]), ==, rows[i][1]);
    }
}

typedef struct MemCase {
    const char *path;
    uint64_t regions[3][2];
    unsigned n;
    uint64_t bytes;
} MemCase;

static const MemCase mem_cases[] = {
    { "/vhost-log/bytes-for-memory/empty", { { 0 } }, 0, 0 },
    { "/vhost-log/bytes-for-memory/one-mib", { { 0, 1 << 20 } }, 1, 32 },
    /* Ends in the middle of page 2: pages 0..2, one byte. */
    { "/vhost-log/bytes-for-memory/unaligned-region",
      { { 0x1800, 0x1000 } }, 1, 1 },
    /* The highest region decides, whatever the order of the table. */
    { "/vhost-log/bytes-for-memory/highest-region",
      { { 0x100000000ull, 0x3001 }, { 0, 0x10000 } }, 2,
      (0x100000000ull / PAGE + 4) / 8 + 1 },
};

static void test_bytes_for_memory(const void *data)
{
    const MemCase *c = data;
    GuestMemory *mem = memory_of(c->regions, c->n);

    g_assert_cmpuint(vhost_log_bytes_for_memory(mem), ==, c->bytes);
    guest_memory_unref(mem);
}

/* ------------------------------------------------------------------------ */
/* Marking                                                                   */

typedef struct MarkCase {
    const char *path;
    uint64_t gpa;
    uint64_t len;
    uint64_t first;          /* pages expected marked: [first, last] */
    uint64_t last;           /* (none when len is 0) */
} MarkCase;

static const MarkCase mark_cases[] = {
    { "/vhost-log/mark/one-byte", 5 * PAGE + 17, 1, 5, 5 },
    { "/vhost-log/mark/whole-page", 3 * PAGE, PAGE, 3, 3 },
    { "/vhost-log/mark/last-byte-of-page", 4 * PAGE - 1, 1, 3, 3 },
    { "/vhost-log/mark/crosses-page", 4 * PAGE - 1, 2, 3, 4 },
    { "/vhost-log/mark/unaligned-two-pages", 2 * PAGE + 100, PAGE, 2, 3 },
    { "/vhost-log/mark/crosses-byte", 7 * PAGE, 2 * PAGE, 7, 8 },
    { "/vhost-log/mark/whole-bytes", 8 * PAGE, 16 * PAGE, 8, 23 },
    { "/vhost-log/mark/spans-bytes", 6 * PAGE + 1, 20 * PAGE, 6, 26 },
    { "/vhost-log/mark/empty", 9 * PAGE, 0, 1, 0 },
    /* Past the log's 8 * 8 pages: only what is inside is marked. */
    { "/vhost-log/mark/clipped-at-end", 62 * PAGE, 10 * PAGE, 62, 63 },
    { "/vhost-log/mark/outside", 64 * PAGE, PAGE, 1, 0 },
    { "/vhost-log/mark/wraps", UINT64_MAX - 10, 100, 1, 0 },
};

#define MARK_LOG_BYTES 8

static void test_mark(const void *data)
{
    const MarkCase *c = data;
    int fd = memfd_of(MARK_LOG_BYTES);
    VhostLog *log = map_ok(fd, MARK_LOG_BYTES, 0, NULL);
    uint8_t bits[MARK_LOG_BYTES];

    vhost_log_mark(log, c->gpa, c->len);
    g_assert_cmpint(pread(fd, bits, sizeof(bits), 0), ==, sizeof(bits));
    for (uint64_t p = 0; p < MARK_LOG_BYTES * 8; p++) {
        bool set = bits[p / 8] & (1u << (p % 8));

        if (set != (p >= c->first && p <= c->last)) {
            g_error("page %" G_GUINT64_FORMAT " is %s", p,
                    set ? "marked" : "not marked");
        }
    }
    shared_mapping_unref(log);
    close(fd);
}

/* Marking ORs: bits set before (by another ring) stay set, and bits the
 * front-end cleared are not brought back by a later mark elsewhere. */
static void test_mark_ors(void)
{
    int fd = memfd_of(PAGE);
    VhostLog *log = map_ok(fd, 2, 0, NULL);
    uint8_t b[2] = { 0x81, 0 };

    g_assert_cmpint(pwrite(fd, b, 2, 0), ==, 2);
    vhost_log_mark(log, 2 * PAGE, 1);
    g_assert_cmpint(pread(fd, b, 2, 0), ==, 2);
    g_assert_cmphex(b[0], ==, 0x85);
    b[0] = 0;                                   /* the front-end clears */
    g_assert_cmpint(pwrite(fd, b, 1, 0), ==, 1);
    vhost_log_mark(log, 9 * PAGE, 1);
    g_assert_cmpint(pread(fd, b, 2, 0), ==, 2);
    g_assert_cmphex(b[0], ==, 0);
    g_assert_cmphex(b[1], ==, 0x02);
    g_assert_cmphex(vhost_log_bitmap(log)[1], ==, 0x02);
    shared_mapping_unref(log);
    close(fd);
}

/* The log starts mmap_offset bytes into the file, page aligned or not. */
static void test_map_offset(void)
{
    static const uint64_t offsets[] = { 0, 100, 8192, 8192 + 4095 };

    for (unsigned i = 0; i < G_N_ELEMENTS(offsets); i++) {
        int fd = memfd_of(4 * PAGE);
        VhostLog *log = map_ok(fd, 4, offsets[i], NULL);
        uint8_t b[6];

        g_assert_cmpuint(vhost_log_size(log), ==, 4);
        vhost_log_mark(log, 0, 1);
        vhost_log_mark(log, 31 * PAGE, 1);
        vhost_log_mark(log, 32 * PAGE, 1);           /* outside: dropped */
        g_assert_cmpint(pread(fd, b, 6, (off_t)offsets[i] - 1 +
                              (offsets[i] == 0)), ==, 6);
        if (offsets[i]) {
            g_assert_cmphex(b[0], ==, 0);
            memmove(b, b + 1, 5);
        }
        g_assert_cmphex(b[0], ==, 0x01);
        g_assert_cmphex(b[3], ==, 0x80);
        g_assert_cmphex(b[4], ==, 0);
        shared_mapping_unref(log);
        close(fd);
    }
}

/* A reference keeps the mapping after the creator let go. */
static void test_refcount(void)
{
    int fd = memfd_of(PAGE);
    VhostLog *log = map_ok(fd, PAGE, 0, NULL);
    VhostLog *ring = shared_mapping_ref(log);

    g_assert_true(ring == log);
    shared_mapping_unref(log);
    vhost_log_mark(ring, 0, 1);
    g_assert_cmphex(vhost_log_bitmap(ring)[0], ==, 1);
    shared_mapping_unref(ring);
    shared_mapping_unref(NULL);
    g_assert_null(shared_mapping_ref(NULL));
    close(fd);
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                    */

typedef struct MapCase {
    const char *path;
    uint64_t file_size;
    uint64_t mmap_size;
    uint64_t mmap_offset;
    uint64_t mem_end;        /* one region [0, mem_end); 0: no table */
    const char *why;         /* NULL: accepted */
} MapCase;

static const MapCase map_cases[] = {
    /* 1 MiB of memory: 256 pages, 32 bytes. */
    { "/vhost-log/map/exact", 32, 32, 0, 1 << 20, NULL },
    { "/vhost-log/map/too-small-for-memory", 4096, 31, 0, 1 << 20,
      "needs 32 bytes" },
    { "/vhost-log/map/one-page-more", 4096, 32, 0, (1 << 20) + 1,
      "needs 33 bytes" },
    { "/vhost-log/map/file-too-short", 31, 32, 0, 1 << 20,
      "past the end of its file" },
    { "/vhost-log/map/offset-past-end", 4096, 32, 4080, 1 << 20,
      "past the end of its file" },
    { "/vhost-log/map/offset-unaligned", 4096, 32, 4064, 1 << 20, NULL },
    { "/vhost-log/map/size-overflows", 4096, UINT64_MAX, 4096, 0,
      "past the end of its file" },
    { "/vhost-log/map/empty", 4096, 0, 0, 0, "empty log" },
    { "/vhost-log/map/no-table", 4096, 1, 0, 0, NULL },
};

static void test_map(const void *data)
{
    const MapCase *c = data;
    const uint64_t region[1][2] = { { 0, c->mem_end } };
    GuestMemory *mem = c->mem_end ? memory_of(region, 1) : NULL;
    int fd = memfd_of(c->file_size);
    Error *err = NULL;
    VhostLog *log = vhost_log_map(fd, c->mmap_size, c->mmap_offset, mem,
                                  &err);

    if (!c->why) {
        g_assert_no_error(err);
        g_assert_nonnull(log);
        g_assert_true(vhost_log_covers(log, mem, "test", NULL));
    } else {
        g_assert_null(log);
        g_assert_nonnull(err);
        g_assert_nonnull(strstr(error_get_pretty(err), "SET_LOG_BASE"));
        if (!strstr(error_get_pretty(err), c->why)) {
            g_error("expected \"%s\" in: %s", c->why, error_get_pretty(err));
        }
        error_free(err);
    }
    shared_mapping_unref(log);
    guest_memory_unref(mem);
    close(fd);
}

/* A table that grows past the log is found out (memory hotplug before
 * the front-end sent the bigger log). */
static void test_covers(void)
{
    const uint64_t small[1][2] = { { 0, 1 << 20 } };
    const uint64_t big[2][2] = { { 0, 1 << 20 }, { 1 << 21, PAGE } };
    GuestMemory *a = memory_of(small, 1), *b = memory_of(big, 2);
    int fd = memfd_of(PAGE);
    VhostLog *log = map_ok(fd, 32, 0, a);
    Error *err = NULL;

    g_assert_false(vhost_log_covers(log, b, "ADD_MEM_REG", &err));
    g_assert_nonnull(strstr(error_get_pretty(err), "ADD_MEM_REG"));
    g_assert_nonnull(strstr(error_get_pretty(err), "needs 65 bytes"));
    error_free(err);
    shared_mapping_unref(log);
    guest_memory_unref(a);
    guest_memory_unref(b);
    close(fd);
}

static const TestCase tests[] = {
    { "/vhost-log/bytes-for", test_bytes_for },
    { "/vhost-log/mark-ors", test_mark_ors },
    { "/vhost-log/map-offset", test_map_offset },
    { "/vhost-log/refcount", test_refcount },
    { "/vhost-log/covers", test_covers },
};

static void add_table_tests(void)
{
    TEST_ADD_ROWS(mem_cases, test_bytes_for_memory, 20);
    TEST_ADD_ROWS(mark_cases, test_mark, 20);
    TEST_ADD_ROWS(map_cases, test_map, 20);
}

TEST_MAIN_SETUP(tests, 20, add_table_tests, NULL)
