/*
 * Unit tests for the qcow2 format driver, with QEMU's qemu-img as the
 * referee.
 *
 * Theory of operation: each test makes a temporary folder, has qemu-img
 * create or convert images there (skipping, with a message, where
 * qemu-img is not installed), opens them with the driver in an
 * AioContext whose home thread is the test's, and drives requests
 * through the public block API (block-test-helpers.h).  Reads are
 * compared with a raw file holding the same data (what qemu-img convert
 * made the image from); after writes, the image goes back to qemu-img:
 * `qemu-img check` must find it clean (no leaks, no corruption) and
 * `qemu-img compare` must find it equal to a raw file written with the
 * same data (the model, kept in memory).  Malformed images are made by
 * patching the header or tables of a good one: they must fail at open
 * with a message naming the problem, or fail the request with -EIO.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "block/block.h"
#include "util/aio.h"
#include "util/bswap.h"
#include "util/iothread.h"
#include "block-test-helpers.h"
#include "test-helpers.h"

/* Each test's watchdog: below the meson timeout of the whole program. */
#define WATCHDOG_S 110

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

typedef struct Fixture {
    char *dir;
    AioContext *ctx;
} Fixture;

static bool have_qemu_img(void)
{
    g_autofree char *path = g_find_program_in_path("qemu-img");

    if (!path) {
        g_test_skip("qemu-img is not installed (apt-get install qemu-utils)");
        return false;
    }
    return true;
}

static bool fixture_init(Fixture *f)
{
    if (!have_qemu_img()) {
        return false;
    }
    f->dir = g_dir_make_tmp("test-qcow2-XXXXXX", NULL);
    g_assert(f->dir);
    f->ctx = ctx_new();
    return true;
}

static void fixture_fini(Fixture *f)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf %s", f->dir);

    g_assert(system(cmd) == 0);
    aio_context_unref(f->ctx);
    g_free(f->dir);
}

/* Run fn(f, data) in a new fixture (skipping without qemu-img). */
static void in_fixture(void (*fn)(Fixture *f, const void *data),
                       const void *data)
{
    Fixture f;

    if (fixture_init(&f)) {
        fn(&f, data);
        fixture_fini(&f);
    }
}

static char *fpath(Fixture *f, const char *name)
{
    return g_build_filename(f->dir, name, NULL);
}

/* Run a shell command in the fixture's folder; its exit status.  The
 * output goes to the test log. */
static int sh(Fixture *f, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static int sh(Fixture *f, const char *fmt, ...)
{
    g_autofree char *cmd = NULL, *full = NULL, *out = NULL, *err = NULL;
    g_autoptr(GError) gerr = NULL;
    int status;
    va_list ap;

    va_start(ap, fmt);
    cmd = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    full = g_strdup_printf("cd %s && %s", f->dir, cmd);
    {
        char *argv[] = { "/bin/sh", "-c", full, NULL };

        g_assert(g_spawn_sync(NULL, argv, NULL, 0, NULL, NULL, &out, &err,
                              &status, &gerr));
    }
    if (!g_spawn_check_wait_status(status, NULL)) {
        g_test_message("'%s' failed:\n%s%s", cmd, out, err);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A deterministic byte for offset off of pattern seed (never all zero
 * over a sector). */
static uint8_t pattern_byte(unsigned seed, uint64_t off)
{
    return (uint8_t)((off * 31 + seed * 7 + (off >> 9)) | 1);
}

static void fill_pattern(uint8_t *buf, uint64_t off, uint64_t len,
                         unsigned seed)
{
    for (uint64_t i = 0; i < len; i++) {
        buf[i] = pattern_byte(seed, off + i);
    }
}

/* Write buf[0..len) to the file name (created). */
static void write_file(Fixture *f, const char *name, const uint8_t *buf,
                       uint64_t len)
{
    g_autofree char *p = fpath(f, name);

    g_assert(g_file_set_contents(p, (const char *)buf, len, NULL));
}

/*
 * A raw disk of size bytes in name: every other 64 KiB stretch a
 * pattern, the rest zeros (holes make unallocated clusters).  Returns
 * its content.
 */
static uint8_t *make_raw(Fixture *f, const char *name, uint64_t size,
                         unsigned seed)
{
    uint8_t *buf = g_malloc0(size);

    for (uint64_t off = 0; off < size; off += 128 * KiB) {
        fill_pattern(buf + off, off, MIN(64 * KiB, size - off), seed);
    }
    write_file(f, name, buf, size);
    return buf;
}

static BlockNode *open_qcow2(Fixture *f, const char *name, const char *extra)
{
    g_autofree char *p = fpath(f, name);
    g_autofree char *str = g_strdup_printf(
        "driver=qcow2,file.driver=file,file.filename=%s%s%s", p,
        extra ? "," : "", extra ? extra : "");

    return open_ok(str, f->ctx);
}

static void open_qcow2_fails(Fixture *f, const char *name, const char *extra,
                             const char *needle)
{
    g_autofree char *p = fpath(f, name);
    g_autofree char *str = g_strdup_printf(
        "driver=qcow2,file.driver=file,file.filename=%s%s%s", p,
        extra ? "," : "", extra ? extra : "");

    open_fails(str, f->ctx, needle);
}

/* Read all of bs in chunks of chunk bytes and compare with want. */
static void check_reads(BlockNode *bs, const uint8_t *want, uint64_t size,
                        uint64_t chunk)
{
    g_autofree uint8_t *buf = g_malloc(chunk);

    g_assert_cmpint(block_node_get_length(bs), ==, size);
    for (uint64_t off = 0; off < size; off += chunk) {
        uint64_t n = MIN(chunk, size - off);

        memset(buf, 0xee, n);
        g_assert_cmpint(run_op(bs, BLOCK_OP_READ, off, buf, n), ==, 0);
        if (memcmp(buf, want + off, n)) {
            for (uint64_t i = 0; i < n; i++) {
                if (buf[i] != want[off + i]) {
                    g_error("byte %" PRIu64 ": read 0x%02x, want 0x%02x",
                            off + i, buf[i], want[off + i]);
                }
            }
        }
    }
}

/* qemu-img check finds name clean, and compare finds it equal to model. */
static void check_image(Fixture *f, const char *name, const uint8_t *model,
                        uint64_t size)
{
    write_file(f, "model.raw", model, size);
    g_assert_cmpint(sh(f, "qemu-img check -f qcow2 %s", name), ==, 0);
    g_assert_cmpint(sh(f, "qemu-img compare -f raw -F qcow2 model.raw %s",
                       name), ==, 0);
}

/* A new empty image.qcow2 of size bytes (qemu-img create with options
 * create), opened with options open (may be NULL). */
static BlockNode *create_open(Fixture *f, const char *create, uint64_t size,
                              const char *open)
{
    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 %s img.qcow2 %" PRIu64,
                       create, size), ==, 0);
    return open_qcow2(f, "img.qcow2", open);
}

/* bs reads as model; closed, img.qcow2 passes check_image(). */
static void close_checked(Fixture *f, BlockNode *bs, const uint8_t *model,
                          uint64_t size)
{
    check_reads(bs, model, size, 256 * KiB);
    block_node_unref(bs);
    check_image(f, "img.qcow2", model, size);
}

/* What is on storage while bs is open: qemu-img (reading past the lock,
 * -U) finds img.qcow2 clean and equal to model. */
static void check_open_image(Fixture *f, const uint8_t *model, uint64_t size)
{
    write_file(f, "model.raw", model, size);
    g_assert_cmpint(sh(f, "qemu-img check -U -f qcow2 img.qcow2"), ==, 0);
    g_assert_cmpint(sh(f, "qemu-img compare -U -f raw -F qcow2 model.raw "
                       "img.qcow2"), ==, 0);
}

/* ------------------------------------------------------------------------ */
/* Reading what qemu-img made                                                */

typedef struct ReadCase {
    const char *path;            /* first: TEST_ADD_ROWS */
    const char *convert;         /* qemu-img convert options */
    uint64_t size;
    uint64_t chunk;              /* read size */
} ReadCase;

static const ReadCase read_cases[] = {
    { "/qcow2/read/64k", "-o cluster_size=64k", 4 * MiB, 64 * KiB },
    { "/qcow2/read/64k-small-reads", "-o cluster_size=64k", 4 * MiB, 4 * KiB },
    { "/qcow2/read/512", "-o cluster_size=512", 1 * MiB, 3 * KiB },
    { "/qcow2/read/2M", "-o cluster_size=2M", 8 * MiB, 1 * MiB },
    { "/qcow2/read/v2", "-o compat=0.10", 4 * MiB, 192 * KiB },
    { "/qcow2/read/refcount-bits-1", "-o refcount_bits=1", 2 * MiB, 64 * KiB },
    { "/qcow2/read/refcount-bits-64", "-o refcount_bits=64", 2 * MiB, 64 * KiB },
    { "/qcow2/read/prealloc-metadata",
      "-o preallocation=metadata", 2 * MiB, 128 * KiB },
    { "/qcow2/read/prealloc-full", "-o preallocation=full", 2 * MiB, 128 * KiB },
    { "/qcow2/read/zlib", "-c", 4 * MiB, 64 * KiB },
    { "/qcow2/read/zlib-4k", "-c -o cluster_size=4k", 1 * MiB, 6 * KiB },
    { "/qcow2/read/zstd", "-c -o compression_type=zstd", 4 * MiB, 96 * KiB },
};

static void read_converted(Fixture *f, const void *data)
{
    const ReadCase *c = data;
    g_autofree uint8_t *want = NULL;
    BlockNode *bs;

    want = make_raw(f, "src.raw", c->size, 1);
    g_assert_cmpint(sh(f, "qemu-img convert -f raw -O qcow2 %s src.raw "
                       "img.qcow2", c->convert), ==, 0);
    bs = open_qcow2(f, "img.qcow2", "read-only=on");
    check_reads(bs, want, c->size, c->chunk);
    block_node_unref(bs);
}

static void test_read_converted(const void *data)
{
    in_fixture(read_converted, data);
}

/* An overlay (only what differs from its raw base), its base found
 * through the header, or given as a node; backing=null shows zeros. */
static void read_backing(Fixture *f, const void *unused)
{
    g_autofree uint8_t *base = NULL, *top = NULL, *zeros = NULL;
    uint64_t size = 2 * MiB;
    BlockNode *bs, *b;

    base = make_raw(f, "base.raw", size, 1);
    top = g_memdup2(base, size);
    memset(top + 200 * KiB, 0x55, 300 * KiB);
    memset(top + 900 * KiB, 0, 64 * KiB);
    memset(top + 1600 * KiB, 0x66, 4 * KiB);
    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 -b base.raw -F raw "
                       "ovl.qcow2 && qemu-io -f qcow2 -c 'write -q -P 0x55 "
                       "200k 300k' -c 'write -q -z 900k 64k' -c 'write -q "
                       "-P 0x66 1600k 4k' ovl.qcow2"), ==, 0);
    bs = open_qcow2(f, "ovl.qcow2", "read-only=on");
    g_assert(block_qcow2_get_backing(bs));
    g_assert_cmpstr(block_qcow2_get_backing_file(bs), ==, "base.raw");
    check_reads(bs, top, size, 64 * KiB);
    block_node_unref(bs);

    /* A shorter base: past its end reads as zeros (what qemu-img reads
     * is the referee). */
    g_assert_cmpint(sh(f, "truncate -s 1M base.raw && qemu-img convert "
                       "-O raw ovl.qcow2 want.raw"), ==, 0);
    {
        g_autofree char *name = fpath(f, "want.raw");
        g_autofree char *data = NULL;
        gsize len;

        g_assert(g_file_get_contents(name, &data, &len, NULL));
        g_assert_cmpint(len, ==, size);
        g_assert(memcmp(data + MiB, top + MiB, MiB) != 0);
        bs = open_qcow2(f, "ovl.qcow2", "read-only=on");
        check_reads(bs, (uint8_t *)data, size, 128 * KiB);
        block_node_unref(bs);
    }

    /* backing=NODE and backing=null. */
    {
        g_autofree char *p = fpath(f, "base.raw");
        g_autofree char *str = g_strdup_printf(
            "driver=raw,node-name=base0,read-only=on,file.driver=file,"
            "file.filename=%s", p);

        b = open_ok(str, f->ctx);
        bs = open_qcow2(f, "ovl.qcow2", "read-only=on,backing=base0");
        g_assert(block_qcow2_get_backing(bs) == b);
        block_node_unref(bs);
        block_node_unref(b);
    }
    /* backing=null: what the overlay does not hold reads as zeros (its
     * first cluster is the base's). */
    zeros = g_malloc0(64 * KiB);
    bs = open_qcow2(f, "ovl.qcow2", "read-only=on,backing=null");
    g_assert(!block_qcow2_get_backing(bs));
    {
        g_autofree uint8_t *buf = g_malloc(64 * KiB);

        g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, buf, 64 * KiB), ==, 0);
        g_assert(memcmp(buf, zeros, 64 * KiB) == 0);
    }
    block_node_unref(bs);
}

static void test_read_backing(void)
{
    in_fixture(read_backing, NULL);
}

/* ------------------------------------------------------------------------ */
/* Writing, checked by qemu-img                                              */

typedef struct WriteCase {
    const char *path;
    const char *create;          /* qemu-img create options */
    uint64_t size;
    unsigned ops;                /* random requests */
    uint64_t max_len;
    bool backing;                /* over a raw base with a pattern */
    const char *open;            /* more options for the node */
} WriteCase;

static const WriteCase write_cases[] = {
    { "/qcow2/write/64k", "-o cluster_size=64k", 8 * MiB, 200, 200 * KiB, false },
    { "/qcow2/write/4k", "-o cluster_size=4k", 4 * MiB, 300, 40 * KiB, false },
    { "/qcow2/write/v2", "-o compat=0.10", 4 * MiB, 200, 100 * KiB, false },
    { "/qcow2/write/backing", "-o cluster_size=64k", 8 * MiB, 200, 200 * KiB, true },
    { "/qcow2/write/512-backing",
      "-o cluster_size=512,refcount_bits=8", 2 * MiB, 300, 8 * KiB, true },
    { "/qcow2/write/refcount-bits-1",
      "-o refcount_bits=1,cluster_size=4k", 2 * MiB, 200, 20 * KiB, false },
    { "/qcow2/write/lazy-refcounts",
      "-o lazy_refcounts=on", 4 * MiB, 100, 100 * KiB, false },
    { "/qcow2/write/o-direct", "-o cluster_size=4k", 4 * MiB, 200, 64 * KiB, true,
      "file.cache.direct=on" },
};

/* Apply ops random requests to bs and to model alike. */
static void random_requests(BlockNode *bs, uint8_t *model, uint64_t size,
                            unsigned ops, uint64_t max_len, unsigned seed)
{
    GRand *rand = g_rand_new_with_seed(seed);

    for (unsigned i = 0; i < ops; i++) {
        uint64_t off = g_rand_int_range(rand, 0, size / 512) * 512;
        uint64_t len = g_rand_int_range(rand, 1, max_len / 512 + 1) * 512;
        int kind = g_rand_int_range(rand, 0, 10);
        g_autofree uint8_t *buf = NULL;

        len = MIN(len, size - off);
        if (kind < 7) {
            buf = g_malloc(len);
            fill_pattern(buf, off, len, seed + i);
            g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, off, buf, len), ==, 0);
            memcpy(model + off, buf, len);
        } else if (kind < 9) {
            g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE_ZEROES, off, NULL, len),
                            ==, 0);
            memset(model + off, 0, len);
        } else {
            /* A discard leaves the data undefined: read back what it left
             * (whole clusters become zeros, the rest stays). */
            buf = g_malloc(len);
            g_assert_cmpint(run_op(bs, BLOCK_OP_DISCARD, off, NULL, len),
                            ==, 0);
            g_assert_cmpint(run_op(bs, BLOCK_OP_READ, off, buf, len), ==, 0);
            memcpy(model + off, buf, len);
        }
    }
    g_assert_cmpint(run_op(bs, BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
    g_rand_free(rand);
}

static void write_random(Fixture *f, const void *data)
{
    const WriteCase *c = data;
    g_autofree uint8_t *model = NULL;
    g_autofree char *opts = NULL;
    BlockNode *bs;

    if (c->backing) {
        model = make_raw(f, "base.raw", c->size, 3);
        g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 %s -b base.raw "
                           "-F raw img.qcow2", c->create), ==, 0);
    }
    opts = g_strdup_printf("discard=unmap%s%s", c->open ? "," : "",
                           c->open ? c->open : "");
    if (c->backing) {
        bs = open_qcow2(f, "img.qcow2", opts);
    } else {
        model = g_malloc0(c->size);
        bs = create_open(f, c->create, c->size, opts);
    }
    random_requests(bs, model, c->size, c->ops, c->max_len, 7);
    close_checked(f, bs, model, c->size);

    /* Opened again, it reads the same, and takes more writes. */
    bs = open_qcow2(f, "img.qcow2", opts);
    check_reads(bs, model, c->size, 128 * KiB);
    random_requests(bs, model, c->size, c->ops / 4, c->max_len, 11);
    close_checked(f, bs, model, c->size);
}

static void test_write_random(const void *data)
{
    in_fixture(write_random, data);
}

/* Writes over compressed clusters and a snapshot's shared clusters copy
 * them; the snapshot still holds the old data afterwards. */
static void write_snapshot_compressed(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB;
    g_autofree uint8_t *orig = NULL, *model = NULL;
    BlockNode *bs;

    orig = make_raw(f, "src.raw", size, 5);
    g_assert_cmpint(sh(f, "qemu-img convert -c -O qcow2 src.raw img.qcow2 "
                       "&& qemu-img snapshot -c snap1 img.qcow2"), ==, 0);
    model = g_memdup2(orig, size);
    bs = open_qcow2(f, "img.qcow2", "discard=unmap");
    random_requests(bs, model, size, 150, 100 * KiB, 13);
    close_checked(f, bs, model, size);
    /* The snapshot is still there, its data what it was. */
    g_assert_cmpint(sh(f, "qemu-img snapshot -l img.qcow2 | grep -q snap1"),
                    ==, 0);
    g_assert_cmpint(sh(f, "qemu-img snapshot -a snap1 img.qcow2"), ==, 0);
    check_image(f, "img.qcow2", orig, size);
}

static void test_write_snapshot_compressed(void)
{
    in_fixture(write_snapshot_compressed, NULL);
}

/* Persistent bitmaps: a read-only open leaves them as they are; a
 * writable one marks them in use (they are not updated here) and keeps
 * the autoclear bit, so they stay listed and their clusters referenced.
 * A bitmap directory that does not match its extension (here: one bitmap
 * more in the count) is given up: the autoclear bit is cleared. */
static void bitmaps(Fixture *f, const void *unused)
{
    g_autofree char *p = NULL, *data = NULL;
    gsize len;
    const uint8_t magic[4] = { 0x23, 0x85, 0x28, 0x75 };
    uint8_t *ext;

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 img.qcow2 4M && "
                       "qemu-img bitmap --add img.qcow2 bm0 && "
                       "cp img.qcow2 bad.qcow2"), ==, 0);
    p = fpath(f, "img.qcow2");
    block_node_unref(open_qcow2(f, "img.qcow2", "read-only=on"));
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    g_assert_cmpint(ld_be64((uint8_t *)data + 88), ==, 1);
    g_clear_pointer(&data, g_free);
    g_assert_cmpint(sh(f, "qemu-img info img.qcow2 | grep -q bm0"), ==, 0);
    g_assert_cmpint(sh(f, "qemu-img info img.qcow2 | grep -q in-use"), !=, 0);

    block_node_unref(open_qcow2(f, "img.qcow2", NULL));
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    g_assert_cmpint(ld_be64((uint8_t *)data + 88), ==, 1);
    g_clear_pointer(&data, g_free);
    g_assert_cmpint(sh(f, "qemu-img info --output=json img.qcow2 | "
                       "grep -q '\"in-use\"'"), ==, 0);
    g_assert_cmpint(sh(f, "qemu-img check img.qcow2 >/dev/null 2>&1"),
                    ==, 0);

    g_free(p);
    p = fpath(f, "bad.qcow2");
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    ext = memmem(data, 4096, magic, sizeof(magic));
    g_assert_nonnull(ext);
    st_be32(ext + 8, 2);                   /* nb_bitmaps */
    g_assert(g_file_set_contents(p, data, len, NULL));
    g_clear_pointer(&data, g_free);
    block_node_unref(open_qcow2(f, "bad.qcow2", NULL));
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    g_assert_cmpint(ld_be64((uint8_t *)data + 88), ==, 0);
}

static void test_bitmaps(void)
{
    in_fixture(bitmaps, NULL);
}

/*
 * Tests that start from an empty image: create it (create, size), open it
 * (open), let run() drive it and the model alike (*size may grow), then
 * check it (close_checked(), and after() on the closed image if set).
 */
typedef struct EmptyCase {
    const char *path;
    const char *create;
    uint64_t size;
    uint64_t max_size;           /* the model's size */
    const char *open;
    void (*run)(BlockNode *bs, uint8_t *model, uint64_t *size);
    void (*after)(Fixture *f);
} EmptyCase;

static void empty_image(Fixture *f, const void *data)
{
    const EmptyCase *c = data;
    g_autofree uint8_t *model = g_malloc0(c->max_size);
    uint64_t size = c->size;
    BlockNode *bs;

    bs = create_open(f, c->create, size, c->open);
    c->run(bs, model, &size);
    close_checked(f, bs, model, size);
    if (c->after) {
        c->after(f);
    }
}

static void test_empty_image(const void *data)
{
    in_fixture(empty_image, data);
}

/* A 32-bit header field of img.qcow2. */
static uint32_t header_u32(Fixture *f, uint64_t off)
{
    g_autofree char *p = fpath(f, "img.qcow2"), *data = NULL;
    gsize len;

    g_assert(g_file_get_contents(p, &data, &len, NULL));
    g_assert_cmpint(len, >=, off + 4);
    return ld_be32((uint8_t *)data + off);
}

/* Growing: the L1 table grows with the image (512-byte clusters: one L2
 * table covers 32 KiB). */
static void run_resize(BlockNode *bs, uint8_t *model, uint64_t *size)
{
    random_requests(bs, model, *size, 50, 4 * KiB, 17);
    check_reads(bs, model, *size, 4 * KiB);
    *size = 3 * MiB;
    g_assert(block_node_resize(bs, *size, NULL));
    g_assert_cmpint(block_node_get_length(bs), ==, *size);
    random_requests(bs, model, *size, 200, 16 * KiB, 19);
}

static void after_resize(Fixture *f)
{
    g_assert_cmpint(sh(f, "qemu-img info img.qcow2 | "
                       "grep -q 'virtual size: 3 MiB'"), ==, 0);
}

/* Two writes to one new cluster, in flight together: both land, one
 * cluster is allocated (qemu-img check finds no leak). */
static void run_race(BlockNode *bs, uint8_t *model, uint64_t *size)
{
    uint8_t a[4096], b[4096];
    TReq ra, rb;

    for (int round = 0; round < 8; round++) {
        uint64_t base = round * 64 * KiB;

        memset(a, 0x10 + round, sizeof(a));
        memset(b, 0x80 + round, sizeof(b));
        treq_init(&ra, BLOCK_OP_WRITE, base, a, sizeof(a));
        treq_init(&rb, BLOCK_OP_WRITE, base + 8 * KiB, b, sizeof(b));
        treq_submit(bs, &ra);
        treq_submit(bs, &rb);
        block_node_drain(bs);
        g_assert(ra.done && rb.done);
        g_assert_cmpint(ra.ret, ==, 0);
        g_assert_cmpint(rb.ret, ==, 0);
        memcpy(model + base, a, sizeof(a));
        memcpy(model + base + 8 * KiB, b, sizeof(b));
    }
}

/* Enough allocation to outgrow the refcount table (512-byte clusters:
 * one table cluster covers 8 MiB), in a file node with O_DIRECT. */
static void run_fill(BlockNode *bs, uint8_t *model, uint64_t *size)
{
    uint64_t chunk = 64 * KiB;

    for (uint64_t off = 0; off < *size; off += 2 * chunk) {
        fill_pattern(model + off, off, chunk, 23);
        g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, off, model + off, chunk),
                        ==, 0);
    }
}

static void after_fill(Fixture *f)
{
    /* The table did grow: more than the one cluster qemu-img made. */
    g_assert_cmpint(header_u32(f, 56), >, 1);
}

/* 4 KiB writes into the middle of empty 64 KiB clusters: they read back
 * with zeros around them, and the file gets only the guest's bytes (a
 * new cluster reads as zeros already), not a whole written cluster each. */
#define SPARSE_WRITES 32

static void run_sparse(BlockNode *bs, uint8_t *model, uint64_t *size)
{
    for (uint64_t i = 0; i < SPARSE_WRITES; i++) {
        uint64_t off = i * 64 * KiB + 32 * KiB;

        fill_pattern(model + off, off, 4 * KiB, 29);
        g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, off, model + off, 4 * KiB),
                        ==, 0);
    }
    check_reads(bs, model, *size, 64 * KiB);
}

static void after_sparse(Fixture *f)
{
    g_autofree char *p = fpath(f, "img.qcow2");
    GStatBuf st;

    g_assert_cmpint(g_stat(p, &st), ==, 0);
    /* qemu-img's metadata (a few clusters) and 32 x 4 KiB of data: well
     * below the 2 MiB that whole written clusters would take. */
    g_assert_cmpint((uint64_t)st.st_blocks * 512, <,
                    SPARSE_WRITES * 64 * KiB / 2);
}

/* An overlay shorter than its base, grown: the new part reads as zeros,
 * not as the base (QEMU's rule), on a version 3 image (zero clusters)
 * and a version 2 one (zeros written). */
static void resize_overlay(Fixture *f, const void *unused)
{
    static const char *const compat[] = { "1.1", "0.10" };
    uint64_t size = 3 * MiB + 512;

    for (unsigned i = 0; i < G_N_ELEMENTS(compat); i++) {
        g_autofree uint8_t *model = make_raw(f, "base.raw", 2 * MiB, 7);
        BlockNode *bs;

        /* The old end in the middle of a cluster: its tail is copied. */
        g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 -o compat=%s "
                           "-b base.raw -F raw img.qcow2 %" PRId64, compat[i],
                           MiB + 512), ==, 0);
        model = g_realloc(model, size);
        memset(model + MiB + 512, 0, size - MiB - 512);
        bs = open_qcow2(f, "img.qcow2", NULL);
        g_assert(block_node_resize(bs, size, NULL));
        close_checked(f, bs, model, size);
    }
}

static void test_resize_overlay(void)
{
    in_fixture(resize_overlay, NULL);
}

static const EmptyCase empty_cases[] = {
    { "/qcow2/resize", "-o cluster_size=512", 64 * KiB, 3 * MiB, NULL, run_resize,
      after_resize },
    { "/qcow2/write/race", "", MiB, MiB, NULL, run_race, NULL },
    { "/qcow2/write/sparse", "", 4 * MiB, 4 * MiB, "file.cache.direct=on",
      run_sparse, after_sparse },
    { "/qcow2/write/refcount-table-growth",
      "-o cluster_size=512", 24 * MiB, 24 * MiB, "file.cache.direct=on",
      run_fill, after_fill },
};

/*
 * The caches are write-back: a FLUSH puts the image in order while the
 * node stays open (qemu-img reads it through the lock with -U); going
 * inactive writes them back too, another program may then write the
 * image, and going active again reads it afresh.
 */
static void flush_and_handover(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    uint8_t buf[4096];
    BlockNode *bs = create_open(f, "-o cluster_size=4k", size, NULL);

    random_requests(bs, model, size, 100, 64 * KiB, 29);   /* ends in FLUSH */
    check_open_image(f, model, size);

    random_requests(bs, model, size, 50, 64 * KiB, 31);
    g_assert(block_node_set_active(bs, false, NULL));
    check_image(f, "img.qcow2", model, size);
    g_assert_cmpint(sh(f, "qemu-io -f qcow2 -c 'write -q -P 0x77 1M 4k' "
                       "img.qcow2"), ==, 0);
    memset(model + MiB, 0x77, 4 * KiB);
    g_assert(block_node_set_active(bs, true, NULL));
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, MiB, buf, sizeof(buf)), ==, 0);
    g_assert(memcmp(buf, model + MiB, sizeof(buf)) == 0);
    random_requests(bs, model, size, 50, 64 * KiB, 37);
    close_checked(f, bs, model, size);
}

static void test_flush_and_handover(void)
{
    in_fixture(flush_and_handover, NULL);
}

/* While the node was inactive, another program allocated a cluster, which
 * grew the file: going active again, new clusters go after it, not over
 * it (and a new cluster still reads as zeros around a short write). */
static void handover_grown(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    BlockNode *bs = create_open(f, "-o cluster_size=4k", size, NULL);

    memset(model, 0x11, 4 * KiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 0, model, 4 * KiB), ==, 0);
    g_assert(block_node_set_active(bs, false, NULL));
    g_assert_cmpint(sh(f, "qemu-io -f qcow2 -c 'write -q -P 0x77 2M 4k' "
                       "img.qcow2"), ==, 0);
    memset(model + 2 * MiB, 0x77, 4 * KiB);
    g_assert(block_node_set_active(bs, true, NULL));
    memset(model + 3 * MiB + 512, 0x22, 1024);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 3 * MiB + 512,
                           model + 3 * MiB + 512, 1024), ==, 0);
    check_reads(bs, model, size, 4 * KiB);
    close_checked(f, bs, model, size);
}

static void test_handover_grown(void)
{
    in_fixture(handover_grown, NULL);
}

/* Several IOThreads on one node, each through its own queue, writing
 * the same new clusters at once (each its own 4 KiB of each cluster). */
enum { MT_THREADS = 3, MT_CLUSTERS = 24 };

typedef struct MtReq {
    BlockRequest req;
    struct iovec iov;
    uint8_t buf[4096];
    uint64_t offset;             /* req.offset may be the file's at the end */
    int ret;
    bool done;
} MtReq;

typedef struct MtJob {
    BlockNode *bs;
    AioContext *ctx;
    unsigned index;
    MtReq reqs[MT_CLUSTERS];
} MtJob;

static void mt_cb(BlockRequest *req, int ret)
{
    MtReq *r = (MtReq *)req;

    r->ret = ret;
    r->done = true;
}

static void mt_work(void *opaque)
{
    MtJob *j = opaque;
    BlockQueue *q = block_queue_new(j->bs, j->ctx, NULL);

    for (unsigned k = 0; k < MT_CLUSTERS; k++) {
        MtReq *r = &j->reqs[k];

        memset(r->buf, 0x20 + j->index * 16 + k % 16, sizeof(r->buf));
        r->iov = (struct iovec) { r->buf, sizeof(r->buf) };
        r->offset = k * 64 * KiB + j->index * 4 * KiB;
        r->req = (BlockRequest) {
            .op = BLOCK_OP_WRITE, .offset = r->offset,
            .bytes = sizeof(r->buf), .iov = &r->iov, .niov = 1, .cb = mt_cb,
        };
        block_queue_submit(q, &r->req);
    }
    block_queue_drain(q);
    block_queue_free(q);
}

static void iothreads(Fixture *f, const void *unused)
{
    uint64_t size = 2 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    IOThread *iots[MT_THREADS];
    GThread *threads[MT_THREADS];
    g_autofree MtJob *jobs = g_new0(MtJob, MT_THREADS);
    g_autofree char *p = NULL, *str = NULL;
    BlockNode *bs;

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 img.qcow2 %" PRIu64,
                       size), ==, 0);
    for (unsigned i = 0; i < MT_THREADS; i++) {
        g_autofree char *id = g_strdup_printf("qcow2-iot%u", i);

        iots[i] = iot_new(id, NULL);
    }
    p = fpath(f, "img.qcow2");
    str = g_strdup_printf("driver=qcow2,file.driver=file,file.filename=%s", p);
    bs = open_ok(str, iothread_get_aio_context(iots[0]));
    for (unsigned i = 0; i < MT_THREADS; i++) {
        jobs[i] = (MtJob) {
            .bs = bs, .ctx = iothread_get_aio_context(iots[i]), .index = i,
        };
        threads[i] = ctx_job_start(jobs[i].ctx, mt_work, &jobs[i]);
    }
    for (unsigned i = 0; i < MT_THREADS; i++) {
        g_thread_join(threads[i]);
        for (unsigned k = 0; k < MT_CLUSTERS; k++) {
            MtReq *r = &jobs[i].reqs[k];

            g_assert(r->done);
            g_assert_cmpint(r->ret, ==, 0);
            memcpy(model + r->offset, r->buf, sizeof(r->buf));
        }
    }
    block_node_unref(bs);
    for (unsigned i = 0; i < MT_THREADS; i++) {
        iothread_destroy(iots[i]);
    }
    check_image(f, "img.qcow2", model, size);
}

static void test_iothreads(void)
{
    in_fixture(iothreads, NULL);
}

/* ------------------------------------------------------------------------ */
/* Allocating writes in the IOThread                                         */

/* One write of an AllocCase, and whether the IOThread allocates for it
 * (block_qcow2_get_iothread_allocs() counts it) or not (a worker does, or
 * the clusters are allocated already). */
typedef struct AllocWrite {
    uint64_t off, len;
    bool iothread;
} AllocWrite;

typedef struct AllocCase {
    const char *path;            /* first: TEST_ADD_ROWS */
    const char *create;          /* qemu-img create options (64 KiB clusters) */
    bool backing;                /* an overlay over a raw base.raw */
    AllocWrite w[8];             /* up to the first of length 0 */
} AllocCase;

/* The first write of each case makes the L2 table (a worker's job); the
 * IOThread takes those into new clusters that need no copy-on-write. */
static const AllocCase alloc_cases[] = {
    { "/qcow2/alloc/iothread", "", false, {
        { 0, 4 * KiB, false },
        { MiB + 8 * KiB, 4 * KiB, true },            /* inside a new cluster */
        { 2 * MiB + 4 * KiB, 192 * KiB, true },      /* four, partial ends */
        { 3 * MiB, 128 * KiB, true },                /* two whole */
        { 4 * MiB + 63 * KiB, 2 * KiB, true },       /* across two */
        { MiB + 16 * KiB, 4 * KiB, false },          /* allocated: in place */
        { 2 * MiB + 60 * KiB, 8 * KiB, false },
    } },
    { "/qcow2/alloc/v2", "-o compat=0.10", false, {
        { 0, 4 * KiB, false },
        { MiB + 8 * KiB, 4 * KiB, true },
        { 2 * MiB + 4 * KiB, 192 * KiB, true },
        { MiB + 16 * KiB, 4 * KiB, false },
    } },
    /* Over a backing file only whole clusters need no copy. */
    { "/qcow2/alloc/backing", "", true, {
        { 2 * MiB + 4 * KiB, 4 * KiB, false },       /* copy-on-write */
        { MiB, 64 * KiB, true },
        { 3 * MiB + 64 * KiB, 128 * KiB, true },
        { 4 * MiB + 4 * KiB, 64 * KiB, false },      /* two partial: copies */
        { 5 * MiB + 60 * KiB, 8 * KiB, false },
    } },
};

static void alloc_writes(Fixture *f, const void *data)
{
    const AllocCase *c = data;
    uint64_t size = 8 * MiB, fast = 0;
    g_autofree uint8_t *model = NULL;
    BlockNode *bs;

    if (c->backing) {
        model = make_raw(f, "base.raw", size, 5);
        g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 -b base.raw "
                           "-F raw img.qcow2"), ==, 0);
        bs = open_qcow2(f, "img.qcow2", NULL);
    } else {
        model = g_malloc0(size);
        bs = create_open(f, c->create, size, NULL);
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(c->w) && c->w[i].len; i++) {
        const AllocWrite *w = &c->w[i];

        fill_pattern(model + w->off, w->off, w->len, 40 + i);
        g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, w->off, model + w->off,
                               w->len), ==, 0);
        fast += w->iothread;
        g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, fast);
    }
    check_reads(bs, model, size, 64 * KiB);
    /* A FLUSH puts what the IOThread allocated on storage. */
    g_assert_cmpint(run_op(bs, BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
    check_open_image(f, model, size);
    close_checked(f, bs, model, size);
}

static void test_alloc_writes(const void *data)
{
    in_fixture(alloc_writes, data);
}

/* A new image with 4 KiB written at 0 (the L2 table made by a worker) and
 * flushed: nothing waits in the caches. */
static BlockNode *create_flushed(Fixture *f, uint8_t *model, uint64_t size)
{
    BlockNode *bs = create_open(f, "", size, NULL);

    fill_pattern(model, 0, 4 * KiB, 1);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 0, model, 4 * KiB), ==, 0);
    g_assert_cmpint(run_op(bs, BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
    return bs;
}

/* A FUA write of 4 KiB of pattern seed at off (into model too). */
static void fua_write(BlockNode *bs, uint8_t *model, uint64_t off,
                      unsigned seed)
{
    TReq w;

    fill_pattern(model + off, off, 4 * KiB, seed);
    treq_init(&w, BLOCK_OP_WRITE, off, model + off, 4 * KiB);
    w.req.flags = BLOCK_REQ_FUA;
    g_assert_cmpint(treq_run(bs, &w), ==, 0);
}

/* A FUA write that allocates is on storage when it completes, its new
 * L2 entry included (a worker's job, not the IOThread's). */
static void alloc_fua(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    BlockNode *bs = create_flushed(f, model, size);

    fua_write(bs, model, MiB, 2);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 0);
    check_open_image(f, model, size);
    close_checked(f, bs, model, size);
}

/*
 * A FUA write in place into a cluster whose allocation is still only in
 * the cache (the IOThread allocated it, nothing flushed since) is on
 * storage when it completes, and so is the entry that maps the cluster:
 * qemu-img reading the file meanwhile sees the data.
 */
static void fua_in_place(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    BlockNode *bs = create_flushed(f, model, size);

    fill_pattern(model + MiB, MiB, 4 * KiB, 2);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, MiB, model + MiB, 4 * KiB), ==,
                    0);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 1);
    fua_write(bs, model, MiB + 8 * KiB, 3);
    check_open_image(f, model, size);
    close_checked(f, bs, model, size);
}

/* The image's file through a blkdebug node with the given rules. */
static BlockNode *open_debug(Fixture *f, const char *rules)
{
    g_autofree char *p = fpath(f, "img.qcow2");
    g_autofree char *str = g_strdup_printf(
        "driver=qcow2,file.driver=blkdebug,file.image.driver=file,"
        "file.image.filename=%s,%s", p, rules);

    return open_ok(str, f->ctx);
}

/*
 * While the IOThread's allocation of a cluster is in flight (every write
 * of the file held back 30 ms): a read of the cluster sees what was there
 * (zeros) and does not wait; a second write into the cluster waits for
 * the first and writes in place (one allocation: check finds no leak); a
 * write into another new cluster is allocated meanwhile.
 */
static void alloc_race(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB, c = MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    g_autofree uint8_t *rbuf = g_malloc(64 * KiB);
    TReq w1, w2, w3, r;
    BlockNode *bs;

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 img.qcow2 %" PRIu64,
                       size), ==, 0);
    bs = open_debug(f, "file.inject-delay.0.op=write,"
                    "file.inject-delay.0.delay-ns=30000000");
    fill_pattern(model, 0, 4 * KiB, 1);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 0, model, 4 * KiB), ==, 0);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 0);

    fill_pattern(model + c, c, 4 * KiB, 2);
    fill_pattern(model + c + 8 * KiB, c + 8 * KiB, 4 * KiB, 3);
    fill_pattern(model + 2 * c, 2 * c, 4 * KiB, 4);
    treq_init(&w1, BLOCK_OP_WRITE, c, model + c, 4 * KiB);
    treq_submit(bs, &w1);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 1);
    memset(rbuf, 0xee, 64 * KiB);
    treq_init(&r, BLOCK_OP_READ, c, rbuf, 64 * KiB);
    treq_submit(bs, &r);
    treq_init(&w2, BLOCK_OP_WRITE, c + 8 * KiB, model + c + 8 * KiB, 4 * KiB);
    treq_submit(bs, &w2);
    treq_init(&w3, BLOCK_OP_WRITE, 2 * c, model + 2 * c, 4 * KiB);
    treq_submit(bs, &w3);
    /* w2 found its cluster busy (a worker's); w3 did not. */
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 2);
    block_node_drain(bs);

    g_assert_cmpint(r.ret, ==, 0);
    g_assert_cmpint(w1.ret, ==, 0);
    g_assert_cmpint(w2.ret, ==, 0);
    g_assert_cmpint(w3.ret, ==, 0);
    for (unsigned i = 0; i < 64 * KiB; i++) {
        g_assert_cmpuint(rbuf[i], ==, 0);
    }
    g_assert_cmpuint(r.seq, <, w1.seq);
    g_assert_cmpuint(w1.seq, <, w2.seq);
    close_checked(f, bs, model, size);
}

/*
 * The L2 table leaves the cache (two tables of 4 KiB clusters, each
 * covering 2 MiB) while the IOThread's allocation in it is in flight:
 * the finisher thread loads it again and sets the entry.
 */
static void alloc_evicted(Fixture *f, const void *unused)
{
    uint64_t size = 8 * MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    g_autofree uint8_t *rbuf = g_malloc(2 * 4 * KiB);
    TReq w, r1, r2;
    BlockNode *bs;

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 -o cluster_size=4k "
                       "img.qcow2 %" PRIu64, size), ==, 0);
    bs = open_debug(f, "l2-cache-size=8192,file.inject-delay.0.op=write,"
                    "file.inject-delay.0.delay-ns=50000000");
    for (uint64_t off = 0; off < 6 * MiB; off += 2 * MiB) {
        fill_pattern(model + off, off, 4 * KiB, 1);
        g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, off, model + off, 4 * KiB),
                        ==, 0);
    }
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, rbuf, 4 * KiB), ==, 0);
    fill_pattern(model + MiB, MiB, 4 * KiB, 2);
    treq_init(&w, BLOCK_OP_WRITE, MiB, model + MiB, 4 * KiB);
    treq_submit(bs, &w);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 1);
    /* Two other tables loaded meanwhile: the first one's is evicted. */
    treq_init(&r1, BLOCK_OP_READ, 2 * MiB, rbuf, 4 * KiB);
    treq_submit(bs, &r1);
    treq_init(&r2, BLOCK_OP_READ, 4 * MiB, rbuf + 4 * KiB, 4 * KiB);
    treq_submit(bs, &r2);
    block_node_drain(bs);
    g_assert_cmpint(w.ret, ==, 0);
    g_assert_cmpint(r1.ret, ==, 0);
    g_assert_cmpint(r2.ret, ==, 0);
    close_checked(f, bs, model, size);
}

/*
 * A data write of the IOThread's allocation that fails fails the guest's
 * write and leaves the cluster as it was (zeros); the new cluster leaks,
 * and that is all qemu-img check finds.  A write there later allocates
 * again.
 */
static void alloc_fails(Fixture *f, const void *unused)
{
    uint64_t size = 4 * MiB, c = MiB;
    g_autofree uint8_t *model = g_malloc0(size);
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    g_autofree char *p = fpath(f, "img.qcow2");
    g_autofree char *rules = NULL;
    uint64_t end;
    GStatBuf st;
    BlockNode *bs;

    bs = create_open(f, "", size, NULL);
    fill_pattern(model, 0, 4 * KiB, 1);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 0, model, 4 * KiB), ==, 0);
    block_node_unref(bs);
    /* Opened again, the first allocation loads the refcount block (a
     * worker's), the second is the IOThread's: at the end + 64 KiB. */
    g_assert_cmpint(g_stat(p, &st), ==, 0);
    end = ((uint64_t)st.st_size + 64 * KiB - 1) / (64 * KiB) * 64 * KiB +
          64 * KiB;
    rules = g_strdup_printf("file.inject-error.0.op=write,"
                            "file.inject-error.0.sector=%" PRIu64 ","
                            "file.inject-error.0.once=on", end / 512);
    bs = open_debug(f, rules);
    fill_pattern(model + 2 * c, 2 * c, 4 * KiB, 2);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 2 * c, model + 2 * c,
                           4 * KiB), ==, 0);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 0);
    memset(buf, 0x55, 4 * KiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, c, buf, 4 * KiB), ==, -EIO);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 1);
    /* One more after it: the leak lies before the file's end, where
     * qemu-img check looks. */
    fill_pattern(model + 3 * c, 3 * c, 4 * KiB, 4);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 3 * c, model + 3 * c,
                           4 * KiB), ==, 0);
    g_assert_cmpuint(block_qcow2_get_iothread_allocs(bs), ==, 2);
    check_reads(bs, model, size, 64 * KiB);
    g_assert_cmpint(run_op(bs, BLOCK_OP_FLUSH, 0, NULL, 0), ==, 0);
    block_node_unref(bs);
    write_file(f, "model.raw", model, size);
    g_assert_cmpint(sh(f, "qemu-img check -f qcow2 img.qcow2"), ==, 3);
    g_assert_cmpint(sh(f, "qemu-img compare -f raw -F qcow2 model.raw "
                       "img.qcow2"), ==, 0);
    g_assert_cmpint(sh(f, "qemu-img check -q -r leaks -f qcow2 img.qcow2"),
                    ==, 0);

    bs = open_qcow2(f, "img.qcow2", NULL);
    fill_pattern(model + c, c, 4 * KiB, 3);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, c, model + c, 4 * KiB), ==, 0);
    close_checked(f, bs, model, size);
}

/* The allocation tests with one fixture and no data of their own. */
typedef struct AllocTest {
    const char *path;            /* first: TEST_ADD_ROWS */
    void (*fn)(Fixture *f, const void *unused);
} AllocTest;

static const AllocTest alloc_tests[] = {
    { "/qcow2/alloc/fua", alloc_fua },
    { "/qcow2/alloc/fua-in-place", fua_in_place },
    { "/qcow2/alloc/race", alloc_race },
    { "/qcow2/alloc/evicted", alloc_evicted },
    { "/qcow2/alloc/fails", alloc_fails },
};

static void test_alloc_one(const void *data)
{
    const AllocTest *t = data;

    in_fixture(t->fn, NULL);
}

/* ------------------------------------------------------------------------ */
/* Refused and malformed images                                              */

/* Overwrite bytes of name at off with the big-endian value v of width w. */
static void patch(Fixture *f, const char *name, uint64_t off, uint64_t v,
                  int w)
{
    g_autofree char *p = fpath(f, name);
    uint8_t buf[8];
    int fd = open(p, O_WRONLY);

    g_assert_cmpint(fd, >=, 0);
    if (w == 8) {
        st_be64(buf, v);
    } else if (w == 4) {
        st_be32(buf, v);
    } else {
        buf[0] = v;
    }
    g_assert_cmpint(pwrite(fd, buf, w, off), ==, w);
    close(fd);
}

typedef struct BadCase {
    const char *path;
    uint64_t off;                /* header field */
    uint64_t value;
    int width;
    const char *needle;          /* in the open error; NULL: opens */
    bool writable_only;          /* read-only=on opens */
} BadCase;

static const BadCase bad_cases[] = {
    { "/qcow2/bad/magic", 0, 0x12345678, 4, "not in qcow2 format" },
    { "/qcow2/bad/version", 4, 4, 4, "Unsupported qcow2 version 4" },
    { "/qcow2/bad/cluster-bits-30", 20, 30, 4, "Unsupported cluster size 2^30" },
    { "/qcow2/bad/cluster-bits-8", 20, 8, 4, "Unsupported cluster size" },
    { "/qcow2/bad/encrypted", 32, 1, 4, "encrypted" },
    { "/qcow2/bad/l1-huge", 36, 0x10000000, 4, "L1 table is too large" },
    { "/qcow2/bad/l1-small", 36, 0, 4, "too small" },
    { "/qcow2/bad/l1-past-end", 40, 0x7fffffff0000ull, 8, "Invalid L1 table offset" },
    { "/qcow2/bad/l1-misaligned", 40, 0x1234, 8, "Invalid L1 table offset" },
    { "/qcow2/bad/refcount-table-in-header",
      48, 0, 8, "Invalid refcount table offset" },
    { "/qcow2/bad/refcount-table-huge",
      56, 0x1000000, 4, "Invalid refcount table size" },
    { "/qcow2/bad/data-file", 72, 1ull << 2, 8, "external data file" },
    { "/qcow2/bad/extended-l2", 72, 1ull << 4, 8, "extended L2" },
    { "/qcow2/bad/unknown-incompat",
      72, 1ull << 9, 8, "unsupported incompatible feature" },
    { "/qcow2/bad/dirty", 72, 1ull << 0, 8, "qemu-img check -r all", true },
    { "/qcow2/bad/corrupt", 72, 1ull << 1, 8, "marked corrupt", true },
    { "/qcow2/bad/refcount-order", 96, 7, 4, "Invalid refcount order" },
    { "/qcow2/bad/header-length", 100, 20, 4, "Invalid header length" },
};

static void bad_header(Fixture *f, const void *data)
{
    const BadCase *c = data;

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 img.qcow2 1M"), ==,
                    0);
    patch(f, "img.qcow2", c->off, c->value, c->width);
    open_qcow2_fails(f, "img.qcow2", NULL, c->needle);
    if (c->writable_only) {
        block_node_unref(open_qcow2(f, "img.qcow2", "read-only=on"));
    } else {
        open_qcow2_fails(f, "img.qcow2", "read-only=on", c->needle);
    }
}

static void test_bad_header(const void *data)
{
    in_fixture(bad_header, data);
}

/* A writable qcow2 node needs a file that grows below it: not a remote
 * or null node, not a block device; read-only it opens as far as its
 * header lets it. */
static void not_growable(Fixture *f, const void *unused)
{
    g_autofree char *p = NULL, *dev = NULL, *str = NULL;
    int lfd;

    open_fails("driver=qcow2,file.driver=null-co", f->ctx,
               "is driver 'null-co'");
    open_fails("driver=qcow2,read-only=on,file.driver=null-co,"
               "file.read-only=on", f->ctx, "not in qcow2 format");
    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 "
                       "-o preallocation=metadata img.qcow2 1M"), ==, 0);
    p = fpath(f, "img.qcow2");
    lfd = loop_attach(p, &dev);
    if (lfd < 0) {
        g_autofree char *msg = g_strdup_printf("no loop device: %s",
                                               g_strerror(-lfd));

        g_test_skip(msg);
        return;
    }
    str = g_strdup_printf("driver=qcow2,file.driver=file,file.filename=%s",
                          dev);
    open_fails(str, f->ctx, "is not one");
    g_free(str);
    str = g_strdup_printf("driver=qcow2,read-only=on,file.driver=file,"
                          "file.filename=%s,file.read-only=on", dev);
    block_node_unref(open_ok(str, f->ctx));
    close(lfd);
}

static void test_not_growable(void)
{
    in_fixture(not_growable, NULL);
}

/* An L2 table past the end of the file, a data cluster past it: the
 * requests that need them fail with -EIO, the others work. */
static void bad_tables(Fixture *f, const void *unused)
{
    g_autofree char *p = NULL, *data = NULL;
    g_autofree uint8_t *want = NULL;
    uint8_t buf[4096];
    uint64_t l1_off, l2_off;
    BlockNode *bs;
    gsize len;

    want = make_raw(f, "src.raw", 4 * MiB, 1);
    g_assert_cmpint(sh(f, "qemu-img convert -O qcow2 -o cluster_size=4k "
                       "src.raw img.qcow2"), ==, 0);
    p = fpath(f, "img.qcow2");
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    l1_off = ld_be64((uint8_t *)data + 40);
    l2_off = ld_be64((uint8_t *)data + l1_off + 8) & 0x00fffffffffffe00ull;
    /* One L2 table covers 2 MiB: the first past the end, the first data
     * cluster of the second too, and the second's second entry into the
     * header. */
    patch(f, "img.qcow2", l1_off, (1ull << 63) | (1ull << 50), 8);
    patch(f, "img.qcow2", l2_off, (1ull << 63) | (1ull << 50), 8);
    patch(f, "img.qcow2", l2_off + 8, (1ull << 63) | 512, 8);
    bs = open_qcow2(f, "img.qcow2", NULL);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, buf, sizeof(buf)), ==, -EIO);
    g_assert_cmpint(run_op(bs, BLOCK_OP_WRITE, 0, buf, sizeof(buf)), ==,
                    -EIO);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 2 * MiB, buf, sizeof(buf)), ==,
                    -EIO);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 2 * MiB + 4 * KiB, buf,
                           sizeof(buf)), ==, -EIO);
    g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 2 * MiB + 8 * KiB, buf,
                           sizeof(buf)), ==, 0);
    g_assert(memcmp(buf, want + 2 * MiB + 8 * KiB, sizeof(buf)) == 0);
    block_node_unref(bs);
}

static void test_bad_tables(void)
{
    in_fixture(bad_tables, NULL);
}

/*
 * A zstd frame whose header asks for a window larger than a cluster is
 * refused (-EIO), so a few bytes of an image cannot make the decoder
 * allocate 128 MiB; the same frame asking for a cluster-sized window
 * reads.  The frame: magic, no content size, the window descriptor, one
 * RLE block of 64 KiB of 0x5a.
 */
static void zstd_window(Fixture *f, const void *unused)
{
    g_autofree char *p = NULL, *data = NULL;
    g_autofree uint8_t *buf = g_malloc(64 * KiB), *want = g_malloc(64 * KiB);
    uint8_t frame[] = { 0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00,
                        0x03, 0x00, 0x08, 0x5a };
    uint64_t l1_off, l2_off, host;
    BlockNode *bs;
    gsize len;
    int fd;

    memset(want, 0x5a, 64 * KiB);
    write_file(f, "src.raw", want, 64 * KiB);
    g_assert_cmpint(sh(f, "qemu-img convert -c -O qcow2 -o "
                       "compression_type=zstd,cluster_size=64k src.raw "
                       "img.qcow2"), ==, 0);
    p = fpath(f, "img.qcow2");
    g_assert(g_file_get_contents(p, &data, &len, NULL));
    l1_off = ld_be64((uint8_t *)data + 40);
    l2_off = ld_be64((uint8_t *)data + l1_off) & 0x00fffffffffffe00ull;
    /* Compressed (bit 62); 64 KiB clusters: the offset is bits 0-53. */
    g_assert(ld_be64((uint8_t *)data + l2_off) & (1ull << 62));
    host = ld_be64((uint8_t *)data + l2_off) & ((1ull << 54) - 1);

    for (unsigned log = 16; log <= 27; log += 11) {
        frame[5] = (log - 10) << 3;       /* exponent, no mantissa */
        fd = open(p, O_WRONLY);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(pwrite(fd, frame, sizeof(frame), host), ==,
                        sizeof(frame));
        close(fd);
        bs = open_qcow2(f, "img.qcow2", "read-only=on");
        memset(buf, 0, 64 * KiB);
        g_assert_cmpint(run_op(bs, BLOCK_OP_READ, 0, buf, 64 * KiB), ==,
                        (log == 16 ? 0 : -EIO));
        if (log == 16) {
            g_assert(memcmp(buf, want, 64 * KiB) == 0);
        }
        block_node_unref(bs);
    }
}

static void test_zstd_window(void)
{
    in_fixture(zstd_window, NULL);
}

/*
 * Images with random bytes of their metadata changed (the header and the
 * first clusters, where qemu-img puts the tables), opened, read whole and
 * written to: whatever the driver makes of them (an open error, -EIO, or
 * data), nothing may crash or touch memory it should not (the sanitizer
 * build checks that).  Seeded: the same images every run.
 */
enum { CORRUPT_ROUNDS = 60 };

static void corrupt_and_use(Fixture *f, const char *src, uint64_t size,
                            unsigned seed)
{
    g_autofree char *path = fpath(f, "bad.qcow2"), *data = NULL;
    g_autofree char *str = g_strdup_printf(
        "driver=qcow2,file.driver=file,file.filename=%s", path);
    g_autofree uint8_t *buf = g_malloc(64 * KiB);
    GRand *rand = g_rand_new_with_seed(seed);
    unsigned opened = 0;
    gsize len;

    {
        g_autofree char *p = fpath(f, src);

        g_assert(g_file_get_contents(p, &data, &len, NULL));
    }
    for (unsigned round = 0; round < CORRUPT_ROUNDS; round++) {
        g_autofree char *copy = g_memdup2(data, len);
        unsigned flips = g_rand_int_range(rand, 1, 5);
        Error *err = NULL;
        BlockNode *bs;

        for (unsigned i = 0; i < flips; i++) {
            /* Half in the header, half anywhere in the first 24 KiB. */
            gsize at = g_rand_boolean(rand) ? g_rand_int_range(rand, 0, 112) :
                       g_rand_int_range(rand, 0, MIN(len, 24 * KiB));

            copy[at] ^= 1u << g_rand_int_range(rand, 0, 8);
        }
        g_assert(g_file_set_contents(path, copy, len, NULL));
        bs = block_node_open_str(str, f->ctx, &err);
        if (!bs) {
            g_test_message("%s round %u: %s", src, round, err->message);
            error_free(err);
            continue;
        }
        opened++;
        for (uint64_t off = 0; off + 64 * KiB <= MIN(size, 4 * MiB);
             off += 64 * KiB) {
            run_op(bs, BLOCK_OP_READ, off, buf, 64 * KiB);
        }
        for (unsigned i = 0; i < 8; i++) {
            uint64_t off = g_rand_int_range(rand, 0, MIN(size, 4 * MiB) / 512);

            memset(buf, i, 4096);
            run_op(bs, BLOCK_OP_WRITE, MIN(off * 512, size - 4096), buf, 4096);
            run_op(bs, BLOCK_OP_DISCARD, MIN(off * 512, size - 8192), NULL,
                   8192);
        }
        run_op(bs, BLOCK_OP_FLUSH, 0, NULL, 0);
        block_node_unref(bs);
    }
    g_test_message("%s: %u of %u opened", src, opened, CORRUPT_ROUNDS);
    g_rand_free(rand);
}

static void corrupt(Fixture *f, const void *unused)
{
    g_free(make_raw(f, "src.raw", 2 * MiB, 1));
    g_assert_cmpint(sh(f, "qemu-img convert -O qcow2 -o cluster_size=4k "
                       "src.raw plain.qcow2 && qemu-img convert -c -O qcow2 "
                       "-o cluster_size=4k src.raw zip.qcow2"), ==, 0);
    corrupt_and_use(f, "plain.qcow2", 2 * MiB, 41);
    corrupt_and_use(f, "zip.qcow2", 2 * MiB, 43);
}

static void test_corrupt(void)
{
    in_fixture(corrupt, NULL);
}

/* Options: the cache sizes as QEMU names them; unknown keys refused. */
static void options(Fixture *f, const void *unused)
{

    g_assert_cmpint(sh(f, "qemu-img create -q -f qcow2 img.qcow2 1G"), ==,
                    0);
    block_node_unref(open_qcow2(f, "img.qcow2",
                                "l2-cache-size=1M,refcount-cache-size=256k,"
                                "cache-clean-interval=30,lazy-refcounts=on"));
    block_node_unref(open_qcow2(f, "img.qcow2", "cache-size=2M"));
    open_qcow2_fails(f, "img.qcow2",
                     "cache-size=1M,l2-cache-size=1M,refcount-cache-size=1M",
                     "must equal cache-size");
    open_qcow2_fails(f, "img.qcow2", "l2-cache-sise=1M", "l2-cache-sise");
    open_qcow2_fails(f, "img.qcow2", "backing=nosuchnode", "nosuchnode");
}

static void test_options(void)
{
    in_fixture(options, NULL);
}

static const TestCase tests[] = {
    { "/qcow2/read/backing", test_read_backing },
    { "/qcow2/write/snapshot-compressed", test_write_snapshot_compressed },
    { "/qcow2/write/bitmaps", test_bitmaps },
    { "/qcow2/write/iothreads", test_iothreads },
    { "/qcow2/write/flush-and-handover", test_flush_and_handover },
    { "/qcow2/write/handover-grown", test_handover_grown },
    { "/qcow2/resize-overlay", test_resize_overlay },
    { "/qcow2/bad/tables", test_bad_tables },
    { "/qcow2/bad/not-growable", test_not_growable },
    { "/qcow2/bad/zstd-window", test_zstd_window },
    { "/qcow2/bad/random", test_corrupt },
    { "/qcow2/options", test_options },
};

/* The table-driven tests: one per row. */
static void add_row_tests(void)
{
    TEST_ADD_ROWS(read_cases, test_read_converted, WATCHDOG_S);
    TEST_ADD_ROWS(write_cases, test_write_random, WATCHDOG_S);
    TEST_ADD_ROWS(alloc_cases, test_alloc_writes, WATCHDOG_S);
    TEST_ADD_ROWS(alloc_tests, test_alloc_one, WATCHDOG_S);
    TEST_ADD_ROWS(empty_cases, test_empty_image, WATCHDOG_S);
    TEST_ADD_ROWS(bad_cases, test_bad_header, WATCHDOG_S);
}

TEST_MAIN_SETUP(tests, WATCHDOG_S, add_row_tests, NULL)
