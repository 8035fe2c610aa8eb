/*
 * CPU lists "0-3,8" (include/util/cpu-list.h).
 *
 * Theory of operation: the list is split at commas, each element at its
 * one '-', and every number goes through cli_parse_uint(), so a CPU list
 * accepts exactly the integers the other options do (no sign, no blanks)
 * and nothing past CPU_SETSIZE - 1, the last CPU a cpu_set_t can name.
 * The elements are expanded into a GArray in the order given.  Any
 * failure gets the one message that shows the accepted syntax.
 */
#include <errno.h>
#include <string.h>

#include <glib.h>

#include "util/cli-parse.h"
#include "util/cpu-list.h"

/* One element, "C" or "LO-HI", appended to cpus; false if malformed. */
static bool cpu_list_add_element(const char *elem, GArray *cpus)
{
    g_auto(GStrv) ends = g_strsplit(elem, "-", 2);
    uint64_t lo, hi;

    if (!cli_parse_uint("", ends[0], 0, CPU_SETSIZE - 1, &lo, NULL) ||
        !cli_parse_uint("", ends[1] ? ends[1] : ends[0], lo,
                        CPU_SETSIZE - 1, &hi, NULL)) {
        return false;
    }
    for (uint64_t c = lo; c <= hi; c++) {
        int cpu = c;

        g_array_append_val(cpus, cpu);
    }
    return true;
}

int *cpu_list_parse(const char *name, const char *str, unsigned *n,
                    Error **errp)
{
    g_autoptr(GArray) cpus = g_array_new(FALSE, FALSE, sizeof(int));
    g_auto(GStrv) elems = NULL;

    if (!str || !*str) {
        goto bad;
    }
    elems = g_strsplit(str, ",", -1);
    for (char **e = elems; *e; e++) {
        if (!cpu_list_add_element(*e, cpus)) {
            goto bad;
        }
    }
    *n = cpus->len;
    return (int *)g_array_free(g_steal_pointer(&cpus), FALSE);
bad:
    error_setg(errp, "%s: expected CPU numbers and ranges such as 0,2 or "
               "0-3, got '%s'", name, str ? str : "");
    return NULL;
}

bool cpu_list_check_allowed(const char *name, const int *cpus, unsigned n,
                            Error **errp)
{
    cpu_set_t allowed;

    if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0) {
        error_setg_errno(errp, errno, "%s: cannot read this process's CPU "
                         "affinity", name);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE ||
            !CPU_ISSET(cpus[i], &allowed)) {
            g_autofree char *list = cpu_list_format(&allowed);

            error_setg(errp, "%s: CPU %d is not in this process's affinity "
                       "mask (allowed: %s)", name, cpus[i], list);
            return false;
        }
    }
    return true;
}

char *cpu_list_format(const cpu_set_t *set)
{
    GString *s = g_string_new(NULL);
    int c = 0;

    while (c < CPU_SETSIZE) {
        int lo = c;

        if (!CPU_ISSET(c, set)) {
            c++;
            continue;
        }
        while (c + 1 < CPU_SETSIZE && CPU_ISSET(c + 1, set)) {
            c++;
        }
        if (s->len) {
            g_string_append_c(s, ',');
        }
        if (c - lo >= 2) {
            g_string_append_printf(s, "%d-%d", lo, c);
        } else if (c > lo) {
            g_string_append_printf(s, "%d,%d", lo, c);
        } else {
            g_string_append_printf(s, "%d", lo);
        }
        c++;
    }
    return g_string_free(s, FALSE);
}
