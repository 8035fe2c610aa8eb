/*
 * spindle-bench: CPU time of another process's threads, and of our own.
 *
 * /proc/PID/task/TID/stat gives utime and stime in clock ticks (10 ms
 * with the usual USER_HZ of 100), which is what the issue of record asks
 * for and what top shows; /proc/PID/task/TID/schedstat gives the time on
 * the CPU in nanoseconds, which a run of a few seconds needs to tell two
 * back-ends apart, and (its third field) how many times the thread was
 * switched in: the context switches a back-end pays per I/O.  Both files
 * are read per thread and matched by TID, so that a thread that appears
 * during the window counts from zero.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <glib.h>

#include "bench.h"
#include "util/clock.h"

typedef struct CpuThread {
    int tid;
    uint64_t utime, stime;       /* ticks */
    int64_t sched_ns;            /* -1: schedstat not readable */
    int64_t switches;            /* -1: schedstat not readable */
} CpuThread;

struct CpuSnapshot {
    int pid;
    GArray *threads;             /* of CpuThread */
};

/* utime and stime (fields 14 and 15) of a stat line; false if malformed. */
static bool parse_stat(const char *text, uint64_t *utime, uint64_t *stime)
{
    /* The command name (field 2) may hold spaces and ')': skip to the last. */
    const char *p = strrchr(text, ')');
    unsigned field = 2;

    if (!p) {
        return false;
    }
    p++;
    while (*p) {
        char *end;

        while (*p == ' ') {
            p++;
        }
        field++;
        if (field == 14 || field == 15) {
            unsigned long long v = strtoull(p, &end, 10);

            if (end == p) {
                return false;
            }
            if (field == 14) {
                *utime = v;
            } else {
                *stime = v;
                return true;
            }
        }
        p = strchr(p, ' ');
        if (!p) {
            break;
        }
    }
    return false;
}

static bool read_thread(int pid, int tid, CpuThread *out)
{
    g_autofree char *stat_path =
        g_strdup_printf("/proc/%d/task/%d/stat", pid, tid);
    g_autofree char *sched_path =
        g_strdup_printf("/proc/%d/task/%d/schedstat", pid, tid);
    g_autofree char *text = NULL;
    g_autofree char *sched = NULL;

    if (!g_file_get_contents(stat_path, &text, NULL, NULL) ||
        !parse_stat(text, &out->utime, &out->stime)) {
        return false;            /* it ended meanwhile */
    }
    out->tid = tid;
    out->sched_ns = -1;
    out->switches = -1;
    if (g_file_get_contents(sched_path, &sched, NULL, NULL)) {
        /* "time on the CPU (ns) time waiting (ns) times switched in" */
        long long v[3];

        if (sscanf(sched, "%lld %lld %lld", &v[0], &v[1], &v[2]) == 3 &&
            v[0] >= 0 && v[2] >= 0) {
            out->sched_ns = v[0];
            out->switches = v[2];
        }
    }
    return true;
}

CpuSnapshot *cpu_snapshot_take(int pid, Error **errp)
{
    g_autofree char *dir_path = g_strdup_printf("/proc/%d/task", pid);
    DIR *dir = opendir(dir_path);
    CpuSnapshot *s;
    struct dirent *de;

    if (!dir) {
        error_setg_errno(errp, errno, "cannot read the threads of process %d "
                         "(%s)", pid, dir_path);
        return NULL;
    }
    s = g_new0(CpuSnapshot, 1);
    s->pid = pid;
    s->threads = g_array_new(false, false, sizeof(CpuThread));
    while ((de = readdir(dir))) {
        CpuThread t;
        char *end;
        long tid = strtol(de->d_name, &end, 10);

        if (end == de->d_name || *end || tid <= 0) {
            continue;
        }
        if (read_thread(pid, (int)tid, &t)) {
            g_array_append_val(s->threads, t);
        }
    }
    closedir(dir);
    if (s->threads->len == 0) {
        error_setg(errp, "process %d has no readable threads (has it "
                   "exited?)", pid);
        cpu_snapshot_free(s);
        return NULL;
    }
    return s;
}

void cpu_snapshot_free(CpuSnapshot *s)
{
    if (s) {
        g_array_unref(s->threads);
        g_free(s);
    }
}

static const CpuThread *find_thread(const CpuSnapshot *s, int tid)
{
    for (guint i = 0; i < s->threads->len; i++) {
        const CpuThread *t = &g_array_index(s->threads, CpuThread, i);

        if (t->tid == tid) {
            return t;
        }
    }
    return NULL;
}

void cpu_snapshot_delta(const CpuSnapshot *before, const CpuSnapshot *after,
                        CpuDelta *out)
{
    double hz = (double)sysconf(_SC_CLK_TCK);
    uint64_t utime = 0, stime = 0;
    int64_t sched = 0, switches = 0;
    bool sched_ok = true;

    for (guint i = 0; i < after->threads->len; i++) {
        const CpuThread *a = &g_array_index(after->threads, CpuThread, i);
        const CpuThread *b = find_thread(before, a->tid);
        CpuThread zero = { .tid = a->tid };

        if (!b) {
            b = &zero;           /* started during the window */
        }
        utime += a->utime >= b->utime ? a->utime - b->utime : 0;
        stime += a->stime >= b->stime ? a->stime - b->stime : 0;
        if (a->sched_ns < 0 || b->sched_ns < 0) {
            sched_ok = false;
        } else {
            sched += a->sched_ns > b->sched_ns ? a->sched_ns - b->sched_ns : 0;
            switches += a->switches > b->switches ?
                        a->switches - b->switches : 0;
        }
    }
    *out = (CpuDelta) {
        .utime_s = (double)utime / hz,
        .stime_s = (double)stime / hz,
        .sched_s = sched_ok ? (double)sched / 1e9 : -1.0,
        .switches = sched_ok ? switches : -1,
        .threads = after->threads->len,
    };
}

uint64_t cpu_thread_ns(void)
{
    return (uint64_t)clock_thread_cpu_ns();
}
