/*
 * Unit tests for inflight I/O tracking (hw/virtio/vhost-inflight.c).
 *
 * Theory of operation: the crash tests simulate the three parties of a
 * restart in one thread, with no rings in guest memory:
 *   - shared memory that outlives a back-end: one queue's part of the
 *     region, and a used ring (its index and the ids written);
 *   - a driver that makes requests available on free heads, reads the
 *     used ring and fails the test on an id it is not waiting for (a
 *     replay) or a request answered twice;
 *   - a back-end process: its tracker, next avail index, used index and
 *     the requests it took, in order.  It takes and answers requests with
 *     the real bookkeeping (vhost_inflight_mark/link/clear), and may be
 *     killed after any store of either: the stores before the cut are
 *     made one by one in the order the header documents, the rest never.
 * After a kill a new back-end resumes from the shared memory alone
 * (vhost_inflight_resume()) and must get back exactly the requests the
 * dead one had taken and not published, in the order it took them, and
 * start taking new ones where it left off.  At the end every request
 * made must have been answered exactly once.
 *
 * The other tests cover the sizes, the sealed memfd, the checks of a
 * region handed back, and hostile region contents.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <glib.h>

#include "hw/virtio/vhost-inflight.h"
#include "test-helpers.h"

#define SIM_MAX_NUM 64
#define SIM_MAX_REQS 4096

/* Stores of one pop and one push, in the header's order. */
#define POP_STORES 2      /* counter, flag */
#define PUSH_STORES 6     /* next, last_batch_head, used elem, used->idx,
                           * flag, header used_idx */

typedef struct Sim {
    unsigned num;
    unsigned capacity;
    GRand *rand;
    /* Shared memory. */
    VhostInflightQueue *q;
    uint16_t used_idx;
    uint16_t used_ring[SIM_MAX_NUM];
    /* The driver. */
    uint16_t avail_idx;
    uint16_t avail_ring[SIM_MAX_NUM];
    int req_of_head[SIM_MAX_NUM];        /* -1: free */
    uint16_t driver_used;
    unsigned next_req;
    uint8_t answers[SIM_MAX_REQS];
    /* The back-end process. */
    VhostInflightTrack t;
    uint16_t be_avail;
    uint16_t be_used;
    uint16_t taken[SIM_MAX_NUM];          /* heads, in the order taken */
    unsigned ntaken;
    /* Statistics, to check the tests reach what they claim. */
    unsigned crashes;
    unsigned resubmitted;
    unsigned batches;
} Sim;

static void sim_init(Sim *s, unsigned num, unsigned capacity, uint16_t base,
                     guint32 seed)
{
    VhostInflightResume r = { .used_idx = base, .num = num };
    uint16_t heads[SIM_MAX_NUM];
    char why[256];

    memset(s, 0, sizeof(*s));
    s->num = num;
    s->capacity = capacity;
    s->rand = g_rand_new_with_seed(seed);
    s->q = g_malloc0(vhost_inflight_queue_bytes(capacity));
    s->used_idx = s->avail_idx = s->driver_used = base;
    for (unsigned i = 0; i < SIM_MAX_NUM; i++) {
        s->req_of_head[i] = -1;
    }
    r.heads = heads;
    g_assert_cmpint(vhost_inflight_resume(s->q, capacity, &r, why,
                                          sizeof(why)), ==, 0);
    g_assert_true(r.fresh);
    g_assert_cmpuint(r.nheads, ==, 0);
    g_assert_cmpuint(s->q->hdr.version, ==, VHOST_INFLIGHT_VERSION);
    g_assert_cmpuint(s->q->hdr.desc_num, ==, capacity);
    g_assert_cmpuint(s->q->hdr.used_idx, ==, base);
    s->t = (VhostInflightTrack) { .q = s->q, .next_counter = 1 };
    s->be_avail = s->be_used = base;
}

static void sim_cleanup(Sim *s)
{
    g_free(s->q);
    g_rand_free(s->rand);
}

/* ---- the driver ---- */

static bool driver_add(Sim *s)
{
    unsigned start = g_rand_int_range(s->rand, 0, s->num);

    if (s->next_req == SIM_MAX_REQS) {
        return false;
    }
    for (unsigned i = 0; i < s->num; i++) {
        unsigned head = (start + i) % s->num;

        if (s->req_of_head[head] < 0) {
            s->req_of_head[head] = s->next_req++;
            s->avail_ring[s->avail_idx % s->num] = head;
            s->avail_idx++;
            return true;
        }
    }
    return false;
}

/* Read what the back-end published: each id must be a request waiting. */
static void driver_reap(Sim *s)
{
    while (s->driver_used != s->used_idx) {
        uint16_t head = s->used_ring[s->driver_used % s->num];
        int req;

        g_assert_cmpuint(head, <, s->num);
        req = s->req_of_head[head];
        g_assert_cmpint(req, >=, 0);            /* else: a replay */
        g_assert_cmpuint(s->answers[req], ==, 0);
        s->answers[req]++;
        s->req_of_head[head] = -1;
        s->driver_used++;
    }
}

/* ---- the back-end ---- */

/* Take the next request, killed after `stores` stores (POP_STORES: not
 * killed).  False if there was none. */
static bool be_pop(Sim *s, unsigned stores)
{
    uint16_t head;

    if (s->be_avail == s->avail_idx) {
        return false;
    }
    head = s->avail_ring[s->be_avail % s->num];
    if (stores >= POP_STORES) {
        vhost_inflight_mark(&s->t, head);
        s->taken[s->ntaken++] = head;
        s->be_avail++;
    } else if (stores == 1) {
        s->q->desc[head].counter = s->t.next_counter;
    }
    return true;
}

/* Answer taken request i, killed after `stores` stores. */
static void be_push(Sim *s, unsigned i, unsigned stores)
{
    uint16_t head = s->taken[i];

    if (stores >= 2) {
        vhost_inflight_link(&s->t, head);
    } else if (stores == 1) {
        s->q->desc[head].next = s->t.last_head;
    }
    if (stores >= 3) {
        s->used_ring[s->be_used % s->num] = head;
    }
    if (stores >= 4) {
        s->used_idx = ++s->be_used;
    }
    if (stores >= PUSH_STORES) {
        vhost_inflight_clear(&s->t, head, s->be_used);
        memmove(&s->taken[i], &s->taken[i + 1],
                (s->ntaken - i - 1) * sizeof(s->taken[0]));
        s->ntaken--;
    } else if (stores == 5) {
        s->q->desc[head].inflight = 0;
    }
}

/*
 * The back-end died (after its last store, which may have published
 * taken[pushing]: pushing is that index or -1).  Start a new one from
 * the shared memory and check what it resubmits.
 */
static void sim_restart(Sim *s, int pushing, bool published)
{
    uint16_t expect[SIM_MAX_NUM], heads[SIM_MAX_NUM];
    unsigned nexpect = 0;
    VhostInflightResume r = { .used_idx = s->used_idx, .num = s->num,
                              .heads = heads };
    VhostInflightResume again;
    char why[256];

    for (unsigned i = 0; i < s->ntaken; i++) {
        if ((int)i != pushing || !published) {
            expect[nexpect++] = s->taken[i];
        }
    }
    driver_reap(s);
    g_assert_cmpint(vhost_inflight_resume(s->q, s->capacity, &r, why,
                                          sizeof(why)), ==, 0);
    g_assert_false(r.fresh);
    g_assert_cmpuint(r.nheads, ==, nexpect);
    for (unsigned i = 0; i < nexpect; i++) {
        g_assert_cmpuint(heads[i], ==, expect[i]);
        g_assert_cmpint(s->req_of_head[heads[i]], >=, 0);
    }
    /* The new back-end takes new requests where the old one stopped. */
    g_assert_cmpuint((uint16_t)(s->used_idx + r.nheads), ==, s->be_avail);
    g_assert_cmpuint(s->q->hdr.used_idx, ==, s->used_idx);
    s->batches += r.batch;

    /* Resuming again (a crash during the first start) changes nothing. */
    again = (VhostInflightResume) { .used_idx = s->used_idx, .num = s->num,
                                    .heads = expect };
    g_assert_cmpint(vhost_inflight_resume(s->q, s->capacity, &again, why,
                                          sizeof(why)), ==, 0);
    g_assert_cmpuint(again.nheads, ==, r.nheads);
    g_assert_cmpmem(expect, again.nheads * 2, heads, r.nheads * 2);
    g_assert_cmpuint(again.batch, ==, 0);

    s->t = (VhostInflightTrack) { .q = s->q, .next_counter = r.next_counter,
                                  .last_head = r.last_batch_head };
    s->be_used = s->used_idx;
    s->be_avail = s->used_idx + r.nheads;
    memcpy(s->taken, heads, r.nheads * sizeof(heads[0]));
    s->ntaken = r.nheads;
    s->crashes++;
    s->resubmitted += r.nheads;
}

/* Drain: take and answer everything, then check every request made was
 * answered exactly once. */
static void sim_finish(Sim *s)
{
    while (be_pop(s, POP_STORES)) {
        /* take them all */
    }
    while (s->ntaken) {
        be_push(s, 0, PUSH_STORES);
    }
    driver_reap(s);
    for (unsigned i = 0; i < s->next_req; i++) {
        g_assert_cmpuint(s->answers[i], ==, 1);
    }
    for (unsigned i = 0; i < s->num; i++) {
        g_assert_cmpuint(s->q->desc[i].inflight, ==, 0);
    }
}

/*
 * One random step: make a request available, take one, answer one (the
 * oldest if in_order, else any), or die in the middle of a take or an
 * answer.
 */
static void sim_step(Sim *s, bool in_order, unsigned crash_permille)
{
    bool crash = g_rand_int_range(s->rand, 0, 1000) < (int)crash_permille;

    switch (g_rand_int_range(s->rand, 0, 3)) {
    case 0:
        if (!driver_add(s)) {
            driver_reap(s);      /* heads come back with the answers */
        }
        break;
    case 1:
        if (!crash) {
            be_pop(s, POP_STORES);
        } else if (be_pop(s, g_rand_int_range(s->rand, 0, POP_STORES))) {
            sim_restart(s, -1, false);
        }
        break;
    case 2: {
        unsigned i, stores;

        if (!s->ntaken) {
            break;
        }
        i = in_order ? 0 : g_rand_int_range(s->rand, 0, s->ntaken);
        stores = crash ? g_rand_int_range(s->rand, 0, PUSH_STORES)
                       : PUSH_STORES;
        be_push(s, i, stores);
        if (crash) {
            sim_restart(s, i, stores >= 4);
        } else if (g_rand_boolean(s->rand)) {
            driver_reap(s);
        }
        break;
    }
    }
}

typedef struct RandomCase {
    const char *path;
    unsigned num;
    unsigned capacity;
    uint16_t base;            /* used index at the first start */
    bool in_order;
} RandomCase;

static void test_random_crashes(const void *data)
{
    const RandomCase *c = data;
    unsigned crashes = 0, resubmitted = 0, batches = 0;

    for (guint32 seed = 1; seed <= 40; seed++) {
        Sim s;

        sim_init(&s, c->num, c->capacity, c->base, seed);
        while (s.next_req < SIM_MAX_REQS) {
            sim_step(&s, c->in_order, 60);
        }
        sim_finish(&s);
        crashes += s.crashes;
        resubmitted += s.resubmitted;
        batches += s.batches;
        /* 4096 requests from base: the used index went round at least
         * once from near the top. */
        sim_cleanup(&s);
    }
    g_assert_cmpuint(crashes, >, 100);
    if (c->num > 1) {
        g_assert_cmpuint(resubmitted, >, 100);
    }
    g_assert_cmpuint(batches, >, 10);
}

#define RANDOM "/vhost-inflight/resume/random/"
static const RandomCase random_cases[] = {
    { RANDOM "out-of-order", .num = 8, .capacity = 8, .base = 0 },
    { RANDOM "in-order", .num = 8, .capacity = 8, .base = 0,
      .in_order = true },
    { RANDOM "wrap-bigger-region", .num = 16, .capacity = 64,
      .base = 65530 },
    { RANDOM "from-65535", .num = 64, .capacity = 64, .base = 65535 },
    { RANDOM "ring-of-one", .num = 1, .capacity = 1, .base = 65535 },
    { RANDOM "in-order-from-32768", .num = 4, .capacity = 32,
      .base = 32768, .in_order = true },
};

/*
 * Every kill point of a fixed history: take 4 requests, answer them out
 * of order (2, 0, 3, 1), from used index 0 and from just below the wrap.
 * For each operation and each store in it, replay the history, kill the
 * back-end after that store, restart, and finish.
 */
static void test_every_cut(void)
{
    static const uint16_t bases[] = { 0, 65534 };
    static const int order[] = { 2, 0, 3, 1 };   /* of the taken, by req */

    for (unsigned b = 0; b < G_N_ELEMENTS(bases); b++) {
        for (unsigned op = 0; op < 8; op++) {
            unsigned stores = op < 4 ? POP_STORES : PUSH_STORES;

            for (unsigned cut = 0; cut < stores; cut++) {
                Sim s;

                sim_init(&s, 8, 8, bases[b], op * 10 + cut);
                for (unsigned i = 0; i < 4; i++) {
                    g_assert_true(driver_add(&s));
                }
                for (unsigned o = 0; o < 8; o++) {
                    unsigned st = o == op ? cut : PUSH_STORES;
                    unsigned i = 0;

                    if (o < 4) {
                        be_pop(&s, st);
                        if (o == op) {
                            sim_restart(&s, -1, false);
                            break;
                        }
                        continue;
                    }
                    /* The index in taken[] of request order[o - 4]. */
                    while (s.req_of_head[s.taken[i]] != order[o - 4]) {
                        i++;
                    }
                    be_push(&s, i, st);
                    if (o == op) {
                        sim_restart(&s, i, cut >= 4);
                        break;
                    }
                }
                sim_finish(&s);
                sim_cleanup(&s);
            }
        }
    }
}

/* A queue part of 8 entries in use, the log at used index log_used. */
static VhostInflightQueue *queue8_in_use(uint16_t log_used)
{
    VhostInflightQueue *q = g_malloc0(vhost_inflight_queue_bytes(8));

    q->hdr.version = 1;
    q->hdr.desc_num = 8;
    q->hdr.used_idx = log_used;
    return q;
}

/* A used-ring update of several entries (another back-end's batch) is
 * finished as a whole; the walk visits exactly the batch. */
static void test_batch_of_three(void)
{
    g_autofree VhostInflightQueue *q = queue8_in_use(10);
    uint16_t heads[8];
    VhostInflightResume r = { .used_idx = 13, .num = 8, .heads = heads };
    char why[256];

    /* In flight: 1, 4, 5, 6 (counters 7, 3, 9, 2); pushed in one batch:
     * 4 then 5 then 6, so 6 heads the list. */
    for (unsigned i = 0; i < 8; i++) {
        q->desc[i].counter = (uint64_t[]){ 0, 7, 0, 0, 3, 9, 2, 0 }[i];
        q->desc[i].inflight = i == 1 || (i >= 4 && i <= 6);
    }
    q->hdr.last_batch_head = 6;
    q->desc[6].next = 5;
    q->desc[5].next = 4;
    q->desc[4].next = 1;       /* beyond the batch: must stay marked */
    g_assert_cmpint(vhost_inflight_resume(q, 8, &r, why, sizeof(why)), ==,
                    0);
    g_assert_cmpuint(r.batch, ==, 3);
    g_assert_cmpuint(r.nheads, ==, 1);
    g_assert_cmpuint(heads[0], ==, 1);
    g_assert_cmpuint(r.next_counter, ==, 8);
    g_assert_cmpuint(q->hdr.used_idx, ==, 13);

    /* Only marked entries below the ring's size come back, oldest first. */
    q->desc[2].inflight = 1;
    q->desc[2].counter = 1;
    q->desc[7].inflight = 1;
    r = (VhostInflightResume) { .used_idx = 13, .num = 4, .heads = heads };
    g_assert_cmpint(vhost_inflight_resume(q, 8, &r, why, sizeof(why)), ==,
                    0);
    g_assert_cmpuint(r.nheads, ==, 2);
    g_assert_cmpuint(heads[0], ==, 2);
    g_assert_cmpuint(heads[1], ==, 1);
}

/* ---- hostile contents ---- */

typedef struct HostileCase {
    const char *path;
    uint16_t version;
    uint16_t desc_num;
    uint16_t log_used;
    uint16_t last_batch_head;
    const char *why;           /* a part of the message */
    unsigned num;              /* the ring's size; 0: 8 */
} HostileCase;

#define HOSTILE "/vhost-inflight/resume/hostile/"
static const HostileCase hostile_cases[] = {
    { HOSTILE "version", 2, 16, 100, 0, "version 2" },
    { HOSTILE "version-max", 0xffff, 16, 100, 0, "version 65535" },
    { HOSTILE "desc-num-too-big", 1, 17, 100, 0, "room for 16" },
    { HOSTILE "desc-num-below-ring", 1, 4, 100, 0, "the ring has 8" },
    { HOSTILE "desc-num-zero", 1, 0, 100, 0, "for 0 descriptors" },
    /* A fresh region cannot be set up for a ring larger than it. */
    { HOSTILE "ring-bigger-than-region", 0, 0, 0, 0,
      "rings of 16 descriptors: the ring has 32", 32 },
    { HOSTILE "batch-too-long", 1, 16, 80, 0, "more than 16 apart" },
    { HOSTILE "batch-behind", 1, 16, 101, 0, "more than 16 apart" },
    { HOSTILE "walk-outside", 1, 16, 99, 16, "descriptor 16 of 16" },
    { HOSTILE "walk-max", 1, 16, 98, 0xffff, "descriptor 65535 of 16" },
};

static void test_hostile(const void *data)
{
    const HostileCase *c = data;
    g_autofree VhostInflightQueue *q =
        g_malloc0(vhost_inflight_queue_bytes(16));
    uint16_t heads[32];
    VhostInflightResume r = { .used_idx = 100, .num = 8, .heads = heads };
    char why[256] = "";

    if (c->num) {
        r.num = c->num;
    }
    q->hdr.version = c->version;
    q->hdr.desc_num = c->desc_num;
    q->hdr.used_idx = c->log_used;
    q->hdr.last_batch_head = c->last_batch_head;
    g_assert_cmpint(vhost_inflight_resume(q, 16, &r, why, sizeof(why)), ==,
                    -EINVAL);
    if (!strstr(why, c->why)) {
        g_error("%s: \"%s\" does not say \"%s\"", c->path, why, c->why);
    }
    g_assert_cmpuint(r.nheads, ==, 0);
}

/* A batch whose list loops ends after batch steps; flags outside the
 * walk's reach are kept. */
static void test_looping_batch(void)
{
    g_autofree VhostInflightQueue *q = queue8_in_use(0);   /* a batch of 8 */
    uint16_t heads[8];
    VhostInflightResume r = { .used_idx = 8, .num = 8, .heads = heads };
    char why[256];

    q->hdr.last_batch_head = 3;
    q->desc[3].next = 3;
    q->desc[3].inflight = 1;
    q->desc[5].inflight = 1;
    g_assert_cmpint(vhost_inflight_resume(q, 8, &r, why, sizeof(why)), ==,
                    0);
    g_assert_cmpuint(r.nheads, ==, 1);
    g_assert_cmpuint(heads[0], ==, 5);
}

/* ---- sizes and the region ---- */

static void test_sizes(void)
{
    g_assert_cmpuint(vhost_inflight_queue_bytes(1), ==, 64);
    g_assert_cmpuint(vhost_inflight_queue_bytes(2), ==, 64);
    g_assert_cmpuint(vhost_inflight_queue_bytes(3), ==, 64);
    g_assert_cmpuint(vhost_inflight_queue_bytes(4), ==, 128);
    g_assert_cmpuint(vhost_inflight_queue_bytes(128), ==, 16 + 2048 + 48);
    g_assert_cmpuint(vhost_inflight_queue_bytes(32768), ==,
                     16 + 16 * 32768 + 48);
    g_assert_cmpuint(vhost_inflight_region_bytes(4, 256), ==,
                     4 * (16 + 4096 + 48));
}

static void test_memfd_sealed(void)
{
    Error *err = NULL;
    int fd = vhost_inflight_memfd_new(8192, &err);
    int seals;

    g_assert_no_error(err);
    g_assert_cmpint(fd, >=, 0);
    seals = fcntl(fd, F_GET_SEALS);
    g_assert_cmpint(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), ==,
                    F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    g_assert_cmpint(ftruncate(fd, 4096), <, 0);
    g_assert_cmpint(ftruncate(fd, 16384), <, 0);
    g_assert_cmpint(lseek(fd, 0, SEEK_END), ==, 8192);
    g_assert_cmpint(fcntl(fd, F_GETFD) & FD_CLOEXEC, !=, 0);
    close(fd);
}

static void test_map_shares(void)
{
    uint64_t size = vhost_inflight_region_bytes(3, 128);
    Error *err = NULL;
    int fd = vhost_inflight_memfd_new(size, &err);
    VhostInflight *r = vhost_inflight_map(fd, size, 0, 3, 128, 4, &err);
    VhostInflight *r2;
    uint8_t *view;

    g_assert_no_error(err);
    g_assert_nonnull(r);
    g_assert_cmpuint(vhost_inflight_num_queues(r), ==, 3);
    g_assert_cmpuint(vhost_inflight_queue_size(r), ==, 128);
    view = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert(view != MAP_FAILED);
    close(fd);                     /* the mapping does not need it */
    r2 = vhost_inflight_map(-1, size, 0, 3, 128, 4, NULL);
    g_assert_null(r2);
    /* Each queue's part on its own cache line, where the layout says. */
    for (unsigned i = 0; i < 3; i++) {
        VhostInflightQueue *q = vhost_inflight_get_queue(r, i);

        g_assert_cmpuint((uintptr_t)q % VHOST_INFLIGHT_ALIGN, ==, 0);
        q->desc[127].counter = 1000 + i;
        g_assert_cmpuint(((VhostInflightQueue *)(view + i * (16 + 2048 +
                          48)))->desc[127].counter, ==, 1000 + i);
    }
    r2 = shared_mapping_ref(r);
    g_assert_true(r2 == r);
    shared_mapping_unref(r);
    vhost_inflight_get_queue(r2, 0)->hdr.version = 1;
    shared_mapping_unref(r2);
    g_assert_cmpuint(((VhostInflightQueue *)view)->hdr.version, ==, 1);
    shared_mapping_ref(NULL);
    shared_mapping_unref(NULL);
    munmap(view, size);
}

typedef struct MapCase {
    const char *path;
    bool unsealed;
    uint64_t file_size;       /* 0: the region's */
    uint64_t mmap_size;       /* 0: the region's */
    uint64_t mmap_offset;
    unsigned num_queues;
    unsigned queue_size;
    const char *why;
} MapCase;

#define REFUSED "/vhost-inflight/map/refused/"
static const MapCase map_cases[] = {
    { REFUSED "unsealed", .unsealed = true, .num_queues = 2, .queue_size = 64,
      .why = "not sealed" },
    { REFUSED "file-too-small", .file_size = 4096, .num_queues = 2, .queue_size = 256,
      .why = "past the end" },
    { REFUSED "offset-past-end", .mmap_offset = 4096, .num_queues = 2,
      .queue_size = 64, .why = "past the end" },
    { REFUSED "offset-unaligned", .mmap_offset = 64, .num_queues = 1,
      .queue_size = 64, .why = "page size" },
    { REFUSED "size-too-small", .mmap_size = 64, .num_queues = 2, .queue_size = 64,
      .why = "need" },
    { REFUSED "size-overflows", .mmap_size = UINT64_MAX, .mmap_offset = 4096,
      .num_queues = 1, .queue_size = 64, .why = "past the end" },
    { REFUSED "no-queues", .num_queues = 0, .queue_size = 64, .why = "1 to 4" },
    { REFUSED "too-many-queues", .num_queues = 5, .queue_size = 64,
      .why = "1 to 4" },
    { REFUSED "queue-size-3", .num_queues = 1, .queue_size = 3,
      .why = "power of two" },
    { REFUSED "queue-size-0", .num_queues = 1, .queue_size = 0,
      .why = "power of two" },
    { REFUSED "queue-size-65536", .num_queues = 1, .queue_size = 65536,
      .why = "power of two" },
};

static void test_map_refused(const void *data)
{
    const MapCase *c = data;
    uint64_t region = vhost_inflight_region_bytes(c->num_queues,
                                                  c->queue_size);
    uint64_t file_size = c->file_size ? c->file_size : MAX(region, 4096);
    Error *err = NULL;
    VhostInflight *r;
    int fd;

    if (c->unsealed) {
        fd = memfd_create("test-inflight", MFD_CLOEXEC);
        g_assert_cmpint(ftruncate(fd, file_size), ==, 0);
    } else {
        fd = vhost_inflight_memfd_new(file_size, &err);
        g_assert_no_error(err);
    }
    r = vhost_inflight_map(fd, c->mmap_size ? c->mmap_size : region,
                           c->mmap_offset, c->num_queues, c->queue_size, 4,
                           &err);
    g_assert_null(r);
    g_assert_nonnull(err);
    if (!strstr(error_get_pretty(err), c->why)) {
        g_error("%s: \"%s\" does not say \"%s\"", c->path,
                error_get_pretty(err), c->why);
    }
    error_free(err);
    close(fd);
}

/* The inline bookkeeping stores what the documented order says, and
 * nothing else. */
static void test_stores(void)
{
    g_autofree VhostInflightQueue *a = g_malloc0(vhost_inflight_queue_bytes(4));
    g_autofree VhostInflightQueue *b = g_malloc0(vhost_inflight_queue_bytes(4));
    VhostInflightTrack t = { .q = a, .next_counter = 41, .last_head = 2 };

    vhost_inflight_mark(&t, 3);
    b->desc[3].counter = 41;
    b->desc[3].inflight = 1;
    g_assert_cmpmem(a, vhost_inflight_queue_bytes(4), b,
                    vhost_inflight_queue_bytes(4));
    g_assert_cmpuint(t.next_counter, ==, 42);
    vhost_inflight_link(&t, 3);
    b->desc[3].next = 2;
    b->hdr.last_batch_head = 3;
    g_assert_cmpmem(a, vhost_inflight_queue_bytes(4), b,
                    vhost_inflight_queue_bytes(4));
    g_assert_cmpuint(t.last_head, ==, 3);
    vhost_inflight_clear(&t, 3, 0);
    b->desc[3].inflight = 0;
    b->hdr.used_idx = 0;
    g_assert_cmpmem(a, vhost_inflight_queue_bytes(4), b,
                    vhost_inflight_queue_bytes(4));
}

static const TestCase tests[] = {
    { "/vhost-inflight/sizes", test_sizes },
    { "/vhost-inflight/memfd-sealed", test_memfd_sealed },
    { "/vhost-inflight/map/shares", test_map_shares },
    { "/vhost-inflight/stores", test_stores },
    { "/vhost-inflight/resume/every-cut", test_every_cut },
    { "/vhost-inflight/resume/batch-of-three", test_batch_of_three },
    { "/vhost-inflight/resume/looping-batch", test_looping_batch },
};

static void add_table_tests(void)
{
    TEST_ADD_ROWS(map_cases, test_map_refused, 50);
    TEST_ADD_ROWS(random_cases, test_random_crashes, 50);
    TEST_ADD_ROWS(hostile_cases, test_hostile, 50);
}

TEST_MAIN_SETUP(tests, 50, add_table_tests, NULL)
