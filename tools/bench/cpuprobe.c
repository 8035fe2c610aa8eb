/*
 * spindle-cpuprobe: what it costs, right now, to cross between two CPUs.
 *
 * Two threads, pinned one to each CPU of --cpus A,B, pass a token back and
 * forth twice over:
 *   - through one cache line: A stores an odd sequence number, B spins
 *     (PAUSE) until it sees it and stores the next even one, A spins until
 *     it sees that.  --round-trips of them in batches; per batch the mean
 *     round trip.  This is what a polled virtqueue or completion ring pays.
 *   - through two eventfds: A writes B's and blocks reading its own, B
 *     (blocked in read) wakes and writes A's.  --wakeups round trips, each
 *     timed alone.  This is what a kick or an interrupt pays: two
 *     wake-ups of a blocked thread on another CPU.
 *
 * The point is not an absolute figure but a comparison between moments: on
 * a virtual machine the host may move the vCPUs (onto SMT siblings, other
 * cores, other sockets), and both costs change with it for minutes at a
 * time, which moves every latency a benchmark measures in between.
 * poll-frontier runs this before and after each measured run, and repeats
 * the runs the machine changed under (docs/bench.md, "Machine phases").
 *
 * The robust statistics are reported: the fastest and the median batch of
 * cache-line round trips (a preempted batch is slow, never fast), and the
 * 10th percentile and median of the wake-ups.  Output: one line of text,
 * or with --json one object.  Exit status 2 on a usage error, 1 when a
 * thread cannot be pinned or an eventfd fails.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <glib.h>
#include <json-glib/json-glib.h>

#include "util/clock.h"
#include "util/cpu-list.h"

#define BATCHES 40
#define ROUND_TRIPS_MAX 10000000
#define WAKEUPS_MAX 100000

typedef struct Probe {
    /* The token's line, apart from everything else (the struct is static:
     * malloc would not honour the alignment). */
    _Alignas(64) atomic_uint seq;
    _Alignas(64) int cpu_a;
    int cpu_b;
    unsigned round_trips;      /* a multiple of BATCHES */
    unsigned wakeups;
    int efd_a, efd_b;          /* B writes efd_a to wake A, and A efd_b */
} Probe;

static Probe probe;

static void one_cpu(cpu_set_t *set, int cpu)
{
    CPU_ZERO(set);
    CPU_SET(cpu, set);
}

static bool efd_write(int fd)
{
    uint64_t one = 1;

    return write(fd, &one, sizeof(one)) == sizeof(one);
}

static bool efd_read(int fd)
{
    uint64_t v;
    ssize_t n;

    do {
        n = read(fd, &v, sizeof(v));
    } while (n < 0 && errno == EINTR);
    return n == sizeof(v);
}

/*
 * B (created already pinned to cpu_b): answer every cache-line round trip,
 * then every wake-up.  An eventfd that fails leaves A blocked in read; an
 * eventfd of this process's own cannot fail short of memory corruption.
 */
static void *side_b(void *opaque)
{
    Probe *p = opaque;

    for (unsigned i = 0; i < p->round_trips; i++) {
        unsigned want = 2 * i + 1;

        while (atomic_load_explicit(&p->seq, memory_order_acquire) != want) {
            cpu_relax();
        }
        atomic_store_explicit(&p->seq, want + 1, memory_order_release);
    }
    for (unsigned i = 0; i < p->wakeups; i++) {
        if (!efd_read(p->efd_b) || !efd_write(p->efd_a)) {
            break;
        }
    }
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* key = v rounded to 0.1 in the object, "LABEL V" in the line. */
static void set_stat(JsonObject *o, GString *text, const char *key,
                     const char *label, double v)
{
    v = round(v * 10) / 10;
    json_object_set_double_member(o, key, v);
    g_string_append_printf(text, " %s %.1f", label, v);
}

int main(int argc, char **argv)
{
    g_autofree char *cpus_opt = NULL;
    int round_trips = 10000, wakeups = 200;
    gboolean json = FALSE;
    GOptionEntry entries[] = {
        { "cpus", 0, 0, G_OPTION_ARG_STRING, &cpus_opt,
          "the two CPUs to cross between (required)", "A,B" },
        { "round-trips", 0, 0, G_OPTION_ARG_INT, &round_trips,
          "cache-line round trips (default 10000)", "N" },
        { "wakeups", 0, 0, G_OPTION_ARG_INT, &wakeups,
          "eventfd wake-up round trips (default 200)", "N" },
        { "json", 0, 0, G_OPTION_ARG_NONE, &json,
          "print one JSON object", NULL },
        { NULL },
    };
    g_autoptr(GOptionContext) ctx = g_option_context_new(NULL);
    g_autoptr(GError) gerr = NULL;
    Error *err = NULL;
    g_autofree int *cpus = NULL;
    unsigned ncpus = 0;

    g_option_context_set_summary(ctx,
        "Measure a cache line's and an eventfd wake-up's round trip between "
        "two CPUs (poll-frontier's check that the machine did not change "
        "under a run).");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!g_option_context_parse(ctx, &argc, &argv, &gerr)) {
        fprintf(stderr, "spindle-cpuprobe: %s\n", gerr->message);
        return 2;
    }
    if (argc > 1) {
        fprintf(stderr, "spindle-cpuprobe: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    if (!cpus_opt) {
        fprintf(stderr, "spindle-cpuprobe: --cpus A,B is required\n");
        return 2;
    }
    cpus = cpu_list_parse("--cpus", cpus_opt, &ncpus, &err);
    if (cpus && ncpus != 2) {
        error_setg(&err, "--cpus: expected two CPUs, got %u", ncpus);
    } else if (cpus && cpus[0] == cpus[1]) {
        error_setg(&err, "--cpus: the two CPUs must differ");
    } else if (cpus) {
        cpu_list_check_allowed("--cpus", cpus, ncpus, &err);
    }
    if (!err && (round_trips < BATCHES || round_trips > ROUND_TRIPS_MAX)) {
        error_setg(&err, "--round-trips: expected %d to %d, got %d", BATCHES,
                   ROUND_TRIPS_MAX, round_trips);
    }
    if (!err && (wakeups < 1 || wakeups > WAKEUPS_MAX)) {
        error_setg(&err, "--wakeups: expected 1 to %d, got %d", WAKEUPS_MAX,
                   wakeups);
    }
    if (err) {
        fprintf(stderr, "spindle-cpuprobe: %s\n", error_get_pretty(err));
        error_free(err);
        return 2;
    }

    Probe *p = &probe;
    cpu_set_t set;
    pthread_attr_t attr;
    pthread_t tb;

    p->cpu_a = cpus[0];
    p->cpu_b = cpus[1];
    p->round_trips = round_trips / BATCHES * BATCHES;
    p->wakeups = wakeups;
    p->efd_a = eventfd(0, EFD_CLOEXEC);
    p->efd_b = eventfd(0, EFD_CLOEXEC);
    if (p->efd_a < 0 || p->efd_b < 0) {
        fprintf(stderr, "spindle-cpuprobe: eventfd: %s\n", g_strerror(errno));
        return 1;
    }
    one_cpu(&set, p->cpu_a);
    int r = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (r) {
        fprintf(stderr, "spindle-cpuprobe: pinning to CPU %d: %s\n", p->cpu_a,
                g_strerror(r));
        return 1;
    }
    /* B starts on its CPU or not at all: a B left on A's CPU would make
     * every round trip a time slice. */
    one_cpu(&set, p->cpu_b);
    r = pthread_attr_init(&attr);
    if (!r) {
        r = pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
    }
    if (!r) {
        r = pthread_create(&tb, &attr, side_b, p);
    }
    if (r) {
        fprintf(stderr, "spindle-cpuprobe: starting a thread on CPU %d: %s\n",
                p->cpu_b, g_strerror(r));
        return 1;
    }
    pthread_attr_destroy(&attr);

    unsigned per_batch = p->round_trips / BATCHES;
    int64_t batch_ps[BATCHES];      /* mean round trip per batch, ps */
    unsigned seq = 0;
    for (unsigned b = 0; b < BATCHES; b++) {
        int64_t t0 = clock_now_ns();

        for (unsigned i = 0; i < per_batch; i++, seq++) {
            atomic_store_explicit(&p->seq, 2 * seq + 1, memory_order_release);
            while (atomic_load_explicit(&p->seq, memory_order_acquire) !=
                   2 * seq + 2) {
                cpu_relax();
            }
        }
        batch_ps[b] = (clock_now_ns() - t0) * 1000 / per_batch;
    }

    int64_t *wake_ns = g_new(int64_t, p->wakeups);
    unsigned done = 0;
    for (; done < p->wakeups; done++) {
        int64_t t0 = clock_now_ns();

        if (!efd_write(p->efd_b) || !efd_read(p->efd_a)) {
            break;
        }
        wake_ns[done] = clock_now_ns() - t0;
    }
    if (done < p->wakeups) {
        fprintf(stderr, "spindle-cpuprobe: eventfd: %s\n", g_strerror(errno));
        return 1;
    }
    pthread_join(tb, NULL);

    qsort(batch_ps, BATCHES, sizeof(batch_ps[0]), cmp_i64);
    qsort(wake_ns, p->wakeups, sizeof(wake_ns[0]), cmp_i64);

    g_autoptr(JsonObject) o = json_object_new();
    g_autoptr(GString) text = g_string_new(NULL);
    json_object_set_int_member(o, "cpu_a", p->cpu_a);
    json_object_set_int_member(o, "cpu_b", p->cpu_b);
    json_object_set_int_member(o, "round_trips", p->round_trips);
    json_object_set_int_member(o, "wakeups", p->wakeups);
    g_string_append_printf(text, "CPU %d <-> %d: cache line round trip (ns):",
                           p->cpu_a, p->cpu_b);
    set_stat(o, text, "cacheline_rt_min_ns", "fastest batch",
             batch_ps[0] / 1000.0);
    set_stat(o, text, "cacheline_rt_median_ns", "median batch",
             batch_ps[BATCHES / 2] / 1000.0);
    g_string_append(text, "; eventfd wake-up round trip (us):");
    set_stat(o, text, "wakeup_rt_p10_us", "p10", wake_ns[p->wakeups / 10] / 1000.0);
    set_stat(o, text, "wakeup_rt_median_us", "median",
             wake_ns[p->wakeups / 2] / 1000.0);

    if (json) {
        g_autoptr(JsonNode) node = json_node_new(JSON_NODE_OBJECT);
        json_node_set_object(node, o);
        g_autofree char *s = json_to_string(node, FALSE);
        printf("%s\n", s);
    } else {
        printf("%s\n", text->str);
    }
    g_free(wake_ns);
    close(p->efd_a);
    close(p->efd_b);
    return 0;
}
