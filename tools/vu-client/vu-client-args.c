/*
 * spindle-vu-client: the command line.
 *
 * Theory of operation
 * -------------------
 * Global options are parsed with GOption in strict POSIX mode, which stops
 * at the first command word.  The rest is split into commands by hand with
 * the table cmd_specs: a command name, its positional arguments, then its
 * own --options (--name VALUE, --name=VALUE or a flag), up to the next
 * command name.  Each command's strings are then converted and checked
 * (sizes with k/M/G suffixes, sector alignment, ranges), so that any
 * mistake ends the program with exit status 2 before a connection is made.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <glib.h>

#include "util/error.h"
#include "vu-client.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE

typedef enum ArgType {
    ARG_FLAG,
    ARG_VALUE,
} ArgType;

typedef struct CmdOption {
    const char *name;
    ArgType type;
} CmdOption;

typedef struct CmdSpec {
    const char *name;
    CmdKind kind;
    unsigned npos;              /* positional arguments */
    const char *usage;
    CmdOption options[10];
} CmdSpec;

static const CmdSpec cmd_specs[] = {
    { "info", CMD_INFO, 0, "info", { { NULL } } },
    { "get-id", CMD_GET_ID, 0, "get-id [--queue Q]",
      { { "queue", ARG_VALUE }, { NULL } } },
    { "write", CMD_WRITE, 2, "write OFFSET LEN [--pattern SEED] [--queue Q]",
      { { "pattern", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "read", CMD_READ, 2, "read OFFSET LEN [--verify SEED | --expect-zeroes]"
      " [--output FILE] [--queue Q]",
      { { "verify", ARG_VALUE }, { "expect-zeroes", ARG_FLAG },
        { "output", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "flush", CMD_FLUSH, 0, "flush [--queue Q]",
      { { "queue", ARG_VALUE }, { NULL } } },
    { "discard", CMD_DISCARD, 2, "discard OFFSET LEN [--queue Q]",
      { { "queue", ARG_VALUE }, { NULL } } },
    { "write-zeroes", CMD_WRITE_ZEROES, 2,
      "write-zeroes OFFSET LEN [--unmap] [--queue Q]",
      { { "unmap", ARG_FLAG }, { "queue", ARG_VALUE }, { NULL } } },
    { "verify-run", CMD_VERIFY_RUN, 0, "verify-run --size BYTES --count N "
      "[--queues N] [--bs BYTES] [--iodepth N] [--seed S] [--offset BYTES]",
      { { "size", ARG_VALUE }, { "count", ARG_VALUE }, { "queues", ARG_VALUE },
        { "bs", ARG_VALUE }, { "iodepth", ARG_VALUE }, { "seed", ARG_VALUE },
        { "offset", ARG_VALUE }, { NULL } } },
    { "reconnect", CMD_RECONNECT, 0, "reconnect", { { NULL } } },
    { "stop", CMD_STOP, 0, "stop", { { NULL } } },
    { "malformed", CMD_MALFORMED, 1, "malformed KIND [--queue Q]",
      { { "queue", ARG_VALUE }, { NULL } } },
    { "stats", CMD_STATS, 0, "stats", { { NULL } } },
    { "bad-request", CMD_BAD_REQUEST, 1, "bad-request KIND [--offset BYTES] "
      "[--pattern SEED] [--queue Q]",
      { { "offset", ARG_VALUE }, { "pattern", ARG_VALUE },
        { "queue", ARG_VALUE }, { NULL } } },
    { "get-config", CMD_GET_CONFIG, 0, "get-config", { { NULL } } },
    { "wait-config-change", CMD_WAIT_CONFIG_CHANGE, 0,
      "wait-config-change [--timeout SECONDS]",
      { { "timeout", ARG_VALUE }, { NULL } } },
    { "wait-file", CMD_WAIT_FILE, 1, "wait-file PATH [--timeout SECONDS]",
      { { "timeout", ARG_VALUE }, { NULL } } },
    /* virtio-scsi; --queue Q is request queue Q (virtqueue 2 + Q). */
    { "scsi-inquiry", CMD_SCSI_INQUIRY, 0, "scsi-inquiry [--lun N] "
      "[--evpd PAGE] [--queue Q]",
      { { "lun", ARG_VALUE }, { "evpd", ARG_VALUE }, { "queue", ARG_VALUE },
        { NULL } } },
    { "scsi-read-capacity", CMD_SCSI_READ_CAPACITY, 0, "scsi-read-capacity "
      "[--lun N] [--cdb 10|16] [--expect-sense KEY] [--queue Q]",
      { { "lun", ARG_VALUE }, { "cdb", ARG_VALUE },
        { "expect-sense", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-report-luns", CMD_SCSI_REPORT_LUNS, 0, "scsi-report-luns "
      "[--lun N] [--queue Q]",
      { { "lun", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-tur", CMD_SCSI_TUR, 0, "scsi-tur [--lun N] [--expect-sense KEY] "
      "[--queue Q]",
      { { "lun", ARG_VALUE }, { "expect-sense", ARG_VALUE },
        { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-read", CMD_SCSI_READ, 2, "scsi-read OFFSET LEN [--lun N] "
      "[--verify SEED | --expect-zeroes] [--cdb 10|16] [--expect-sense KEY] "
      "[--queue Q]",
      { { "lun", ARG_VALUE }, { "verify", ARG_VALUE },
        { "expect-zeroes", ARG_FLAG }, { "cdb", ARG_VALUE },
        { "expect-sense", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-write", CMD_SCSI_WRITE, 2, "scsi-write OFFSET LEN [--lun N] "
      "[--pattern SEED] [--cdb 10|16] [--fua] [--expect-sense KEY] "
      "[--queue Q]",
      { { "lun", ARG_VALUE }, { "pattern", ARG_VALUE }, { "cdb", ARG_VALUE },
        { "fua", ARG_FLAG }, { "expect-sense", ARG_VALUE },
        { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-unmap", CMD_SCSI_UNMAP, 2, "scsi-unmap LBA COUNT [--lun N] "
      "[--expect-sense KEY] [--queue Q]",
      { { "lun", ARG_VALUE }, { "expect-sense", ARG_VALUE },
        { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-sync", CMD_SCSI_SYNC, 0, "scsi-sync [--lun N] [--queue Q]",
      { { "lun", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
    { "scsi-tmf", CMD_SCSI_TMF, 1, "scsi-tmf KIND [--lun N] [--tag T]",
      { { "lun", ARG_VALUE }, { "tag", ARG_VALUE }, { NULL } } },
    { "scsi-an-query", CMD_SCSI_AN_QUERY, 0, "scsi-an-query [--lun N] "
      "[--events MASK]",
      { { "lun", ARG_VALUE }, { "events", ARG_VALUE }, { NULL } } },
    { "scsi-events", CMD_SCSI_EVENTS, 0, "scsi-events [--wait SECONDS]",
      { { "wait", ARG_VALUE }, { NULL } } },
    { "scsi-verify-run", CMD_SCSI_VERIFY_RUN, 0, "scsi-verify-run "
      "--size BYTES --count N [--lun N] [--queues N] [--bs BYTES] "
      "[--iodepth N] [--seed S] [--offset BYTES] [--cdb 10|16]",
      { { "size", ARG_VALUE }, { "count", ARG_VALUE }, { "queues", ARG_VALUE },
        { "bs", ARG_VALUE }, { "iodepth", ARG_VALUE }, { "seed", ARG_VALUE },
        { "offset", ARG_VALUE }, { "lun", ARG_VALUE }, { "cdb", ARG_VALUE },
        { NULL } } },
    { "scsi-bad-request", CMD_SCSI_BAD_REQUEST, 1, "scsi-bad-request KIND "
      "[--lun N] [--queue Q]",
      { { "lun", ARG_VALUE }, { "queue", ARG_VALUE }, { NULL } } },
};

static const CmdSpec *find_cmd_spec(const char *name)
{
    size_t i;

    for (i = 0; i < G_N_ELEMENTS(cmd_specs); i++) {
        if (!strcmp(cmd_specs[i].name, name)) {
            return &cmd_specs[i];
        }
    }
    return NULL;
}

/* A byte count: decimal or 0x hex, optional suffix k/K, M, G, T (binary). */
static bool parse_size(const char *what, const char *str, uint64_t *out,
                       Error **errp)
{
    char *end;
    uint64_t v, mult = 1;

    errno = 0;
    if (!str || !*str || *str == '-') {
        goto bad;
    }
    v = g_ascii_strtoull(str, &end, 0);
    if (errno || end == str) {
        goto bad;
    }
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mult = 1ull << 10; break;
        case 'm': case 'M': mult = 1ull << 20; break;
        case 'g': case 'G': mult = 1ull << 30; break;
        case 't': case 'T': mult = 1ull << 40; break;
        default: goto bad;
        }
        end++;
        if (*end == 'i') {
            end++;
        }
        if (*end == 'B') {
            end++;
        }
        if (*end) {
            goto bad;
        }
    }
    if (__builtin_mul_overflow(v, mult, out)) {
        goto bad;
    }
    return true;
bad:
    error_setg(errp, "%s: expected a byte count such as 4096, 64k or 1M, "
               "got '%s'", what, str ? str : "");
    return false;
}

static bool parse_uint(const char *what, const char *str, uint64_t min,
                       uint64_t max, uint64_t *out, Error **errp)
{
    char *end;
    uint64_t v;

    errno = 0;
    if (!str || !*str || *str == '-') {
        goto bad;
    }
    v = g_ascii_strtoull(str, &end, 0);
    if (errno || *end || v < min || v > max) {
        goto bad;
    }
    *out = v;
    return true;
bad:
    error_setg(errp, "%s: expected an integer from %" PRIu64 " to %" PRIu64
               ", got '%s'", what, min, max, str ? str : "");
    return false;
}

void command_free(gpointer p)
{
    Command *cmd = p;

    g_free(cmd->output);
    g_free(cmd->what);
    g_free(cmd);
}

/* Look up --name's value in the command's options (NULL if absent). */
static const char *opt_value(GHashTable *vals, const char *name)
{
    return g_hash_table_lookup(vals, name);
}

/* The OFFSET and LEN arguments (pos[0], pos[1]) into cmd, as sizes. */
static bool convert_offset_len(Command *cmd, char **pos, Error **errp)
{
    g_autofree char *w_off = g_strdup_printf("%s OFFSET", cmd->name);
    g_autofree char *w_len = g_strdup_printf("%s LEN", cmd->name);

    return parse_size(w_off, pos[0], &cmd->offset, errp) &&
           parse_size(w_len, pos[1], &cmd->len, errp);
}

/*
 * The KIND argument (pos[0]) into cmd->what: one of the names valid()
 * accepts, else the error lists kinds().
 */
static bool convert_kind(Command *cmd, char **pos,
                         bool (*valid)(const char *name),
                         char *(*kinds)(void), Error **errp)
{
    cmd->what = g_strdup(pos[0]);
    if (!valid(cmd->what)) {
        g_autofree char *names = kinds();

        error_setg(errp, "%s: unknown kind '%s'; expected one of: %s",
                   cmd->name, cmd->what, names);
        return false;
    }
    return true;
}

/* A read's --expect-zeroes, which excludes --verify. */
static bool convert_expect_zeroes(Command *cmd, GHashTable *vals,
                                  Error **errp)
{
    cmd->expect_zeroes = g_hash_table_contains(vals, "expect-zeroes");
    if (cmd->expect_zeroes && opt_value(vals, "verify")) {
        error_setg(errp, "%s: --verify and --expect-zeroes exclude each "
                   "other", cmd->name);
        return false;
    }
    return true;
}

static bool convert_io_args(Command *cmd, char **pos, GHashTable *vals,
                            Error **errp)
{
    if (!convert_offset_len(cmd, pos, errp)) {
        return false;
    }
    if (cmd->offset % SECTOR || cmd->len % SECTOR || cmd->len == 0) {
        error_setg(errp, "%s: OFFSET and LEN must be multiples of %u and LEN "
                   "non-zero (got %" PRIu64 " and %" PRIu64 ")", cmd->name,
                   SECTOR, cmd->offset, cmd->len);
        return false;
    }
    return true;
}

static bool convert_seed(Command *cmd, const char *opt, const char *str,
                         Error **errp)
{
    g_autofree char *what = g_strdup_printf("%s --%s", cmd->name, opt);

    if (!str) {
        return true;
    }
    cmd->have_seed = true;
    return parse_uint(what, str, 0, UINT64_MAX, &cmd->seed, errp);
}

static bool convert_verify_run(Command *cmd, GHashTable *vals, Error **errp)
{
    uint64_t queues = 0;
    const char *seed = opt_value(vals, "seed");

    cmd->bs = 4096;
    cmd->iodepth = 8;
    cmd->seed = 1;
    if (!opt_value(vals, "size") || !opt_value(vals, "count")) {
        error_setg(errp, "verify-run needs --size BYTES and --count N");
        return false;
    }
    if (!parse_size("verify-run --size", opt_value(vals, "size"), &cmd->size,
                    errp) ||
        !parse_uint("verify-run --count", opt_value(vals, "count"), 1,
                    1000000000, &cmd->count, errp) ||
        (opt_value(vals, "bs") &&
         !parse_size("verify-run --bs", opt_value(vals, "bs"), &cmd->bs,
                     errp)) ||
        (opt_value(vals, "iodepth") &&
         !parse_uint("verify-run --iodepth", opt_value(vals, "iodepth"), 1,
                     1024, &cmd->iodepth, errp)) ||
        (opt_value(vals, "queues") &&
         !parse_uint("verify-run --queues", opt_value(vals, "queues"), 1,
                     VUF_QUEUES_MAX, &queues, errp)) ||
        (seed && !parse_uint("verify-run --seed", seed, 0, UINT64_MAX,
                             &cmd->seed, errp)) ||
        (opt_value(vals, "offset") &&
         !parse_size("verify-run --offset", opt_value(vals, "offset"),
                     &cmd->offset, errp))) {
        return false;
    }
    cmd->run_queues = queues;
    if (cmd->bs % SECTOR || cmd->bs == 0 || cmd->bs > RUN_BS_MAX) {
        error_setg(errp, "verify-run --bs must be a non-zero multiple of %u "
                   "up to 16M, got %" PRIu64, SECTOR, cmd->bs);
        return false;
    }
    if (cmd->offset % SECTOR) {
        error_setg(errp, "verify-run --offset must be a multiple of %u",
                   SECTOR);
        return false;
    }
    return true;
}

/* The options every scsi-* command may have: --lun, --cdb, --expect-sense. */
static bool convert_scsi_common(Command *cmd, GHashTable *vals, Error **errp)
{
    g_autofree char *w_lun = g_strdup_printf("%s --lun", cmd->name);
    g_autofree char *w_cdb = g_strdup_printf("%s --cdb", cmd->name);
    const char *key = opt_value(vals, "expect-sense");
    uint64_t v;

    cmd->evpd_page = -1;
    cmd->cdb_bits = 16;
    cmd->expect_sense = -1;
    if (opt_value(vals, "lun")) {
        if (!parse_uint(w_lun, opt_value(vals, "lun"), 0,
                        16383, &v, errp)) {
            return false;
        }
        cmd->lun = v;
    }
    if (opt_value(vals, "cdb")) {
        if (!parse_uint(w_cdb, opt_value(vals, "cdb"), 10, 16, &v, errp) ||
            (v != 10 && v != 16)) {
            if (errp && !*errp) {
                error_setg(errp, "%s: expected 10 or 16, got '%s'", w_cdb,
                           opt_value(vals, "cdb"));
            }
            return false;
        }
        cmd->cdb_bits = v;
    }
    if (key) {
        cmd->expect_sense = scsi_sense_key_by_name(key);
        if (cmd->expect_sense < 0) {
            error_setg(errp, "%s --expect-sense: unknown sense key '%s' "
                       "(a name such as DATA_PROTECT or UNIT_ATTENTION, or "
                       "a number from 0 to 15)", cmd->name, key);
            return false;
        }
    }
    return true;
}

/* OFFSET and LEN of scsi-read and scsi-write: bytes, whole blocks
 * (checked against the LUN's block size when the command runs). */
static bool convert_scsi_io(Command *cmd, char **pos, GHashTable *vals,
                            Error **errp)
{
    if (!convert_offset_len(cmd, pos, errp)) {
        return false;
    }
    if (cmd->offset % SECTOR || cmd->len % SECTOR || cmd->len == 0) {
        error_setg(errp, "%s: OFFSET and LEN must be multiples of the "
                   "LUN's block size (512 or 4096) and LEN non-zero (got %"
                   PRIu64 " and %" PRIu64 ")", cmd->name, cmd->offset,
                   cmd->len);
        return false;
    }
    return true;
}

static bool convert_scsi_command(Command *cmd, char **pos, GHashTable *vals,
                                 Error **errp)
{
    uint64_t v;

    if (!convert_scsi_common(cmd, vals, errp)) {
        return false;
    }
    switch (cmd->kind) {
    case CMD_SCSI_INQUIRY:
        if (opt_value(vals, "evpd")) {
            if (!parse_uint("scsi-inquiry --evpd", opt_value(vals, "evpd"), 0,
                            255, &v, errp)) {
                return false;
            }
            cmd->evpd_page = v;
        }
        return true;
    case CMD_SCSI_READ:
        return convert_expect_zeroes(cmd, vals, errp) &&
               convert_scsi_io(cmd, pos, vals, errp) &&
               convert_seed(cmd, "verify", opt_value(vals, "verify"), errp);
    case CMD_SCSI_WRITE:
        cmd->seed = 1;
        cmd->fua = g_hash_table_contains(vals, "fua");
        return convert_scsi_io(cmd, pos, vals, errp) &&
               convert_seed(cmd, "pattern", opt_value(vals, "pattern"), errp);
    case CMD_SCSI_UNMAP:
        return parse_uint("scsi-unmap LBA", pos[0], 0, UINT64_MAX, &cmd->lba,
                          errp) &&
               parse_uint("scsi-unmap COUNT", pos[1], 1, UINT32_MAX,
                          &cmd->nblocks, errp);
    case CMD_SCSI_TMF:
        cmd->what = g_strdup(pos[0]);
        if (vufscsi_tmf_by_name(cmd->what) < 0) {
            error_setg(errp, "scsi-tmf: unknown kind '%s'; expected one of: "
                       "abort-task, abort-task-set, clear-aca, "
                       "clear-task-set, i-t-nexus-reset, "
                       "logical-unit-reset, query-task, query-task-set",
                       cmd->what);
            return false;
        }
        if (opt_value(vals, "tag")) {
            cmd->have_tag = true;
            return parse_uint("scsi-tmf --tag", opt_value(vals, "tag"), 0,
                              UINT64_MAX, &cmd->tag, errp);
        }
        return true;
    case CMD_SCSI_AN_QUERY:
        cmd->events = UINT32_MAX;
        return !opt_value(vals, "events") ||
               parse_uint("scsi-an-query --events", opt_value(vals, "events"),
                          0, UINT32_MAX, &cmd->events, errp);
    case CMD_SCSI_EVENTS:
        if (opt_value(vals, "wait")) {
            char *e;

            cmd->wait_s = g_ascii_strtod(opt_value(vals, "wait"), &e);
            if (e == opt_value(vals, "wait") || *e || !(cmd->wait_s >= 0) ||
                cmd->wait_s > 3600) {
                error_setg(errp, "scsi-events --wait: expected seconds from "
                           "0 to 3600, got '%s'", opt_value(vals, "wait"));
                return false;
            }
        }
        return true;
    case CMD_SCSI_VERIFY_RUN:
        return convert_verify_run(cmd, vals, errp);
    case CMD_SCSI_BAD_REQUEST:
        return convert_kind(cmd, pos, scsi_bad_request_kind_valid,
                            scsi_bad_request_kinds, errp);
    default:
        return true;
    }
}

/* --timeout SECONDS of wait-config-change and wait-file (-1: absent). */
static bool convert_wait_timeout(Command *cmd, GHashTable *vals,
                                 Error **errp)
{
    const char *str = opt_value(vals, "timeout");
    char *end;

    cmd->wait_s = -1;
    if (!str) {
        return true;
    }
    cmd->wait_s = g_ascii_strtod(str, &end);
    if (end == str || *end || !(cmd->wait_s >= 0) || cmd->wait_s > 86400) {
        error_setg(errp, "%s --timeout: expected seconds from 0 to 86400, "
                   "got '%s'", cmd->name, str);
        return false;
    }
    return true;
}

static bool convert_command(Command *cmd, char **pos, GHashTable *vals,
                            Error **errp)
{
    const char *queue = opt_value(vals, "queue");
    uint64_t q = 0;

    if (queue) {
        g_autofree char *what = g_strdup_printf("%s --queue", cmd->name);

        if (!parse_uint(what, queue, 0, VUF_QUEUES_MAX - 1, &q, errp)) {
            return false;
        }
    }
    cmd->queue = q;
    if (command_device(cmd->kind) == CMD_DEV_SCSI) {
        return convert_scsi_command(cmd, pos, vals, errp);
    }
    switch (cmd->kind) {
    case CMD_WRITE:
        cmd->seed = 1;
        return convert_io_args(cmd, pos, vals, errp) &&
               convert_seed(cmd, "pattern", opt_value(vals, "pattern"), errp);
    case CMD_READ:
        cmd->output = g_strdup(opt_value(vals, "output"));
        return convert_expect_zeroes(cmd, vals, errp) &&
               convert_io_args(cmd, pos, vals, errp) &&
               convert_seed(cmd, "verify", opt_value(vals, "verify"), errp);
    case CMD_DISCARD:
    case CMD_WRITE_ZEROES:
        cmd->unmap = g_hash_table_contains(vals, "unmap");
        if (!convert_io_args(cmd, pos, vals, errp)) {
            return false;
        }
        if (cmd->len / SECTOR > UINT32_MAX) {
            error_setg(errp, "%s: LEN is at most %" PRIu64 " bytes",
                       cmd->name, (uint64_t)UINT32_MAX * SECTOR);
            return false;
        }
        return true;
    case CMD_VERIFY_RUN:
        return convert_verify_run(cmd, vals, errp);
    case CMD_MALFORMED:
        return convert_kind(cmd, pos, malformed_kind_valid, malformed_kinds,
                            errp);
    case CMD_BAD_REQUEST:
        if (!convert_kind(cmd, pos, bad_request_kind_valid, bad_request_kinds,
                          errp)) {
            return false;
        }
        if (opt_value(vals, "offset") &&
            !parse_size("bad-request --offset", opt_value(vals, "offset"),
                        &cmd->offset, errp)) {
            return false;
        }
        if (cmd->offset % SECTOR) {
            error_setg(errp, "bad-request --offset must be a multiple of %u",
                       SECTOR);
            return false;
        }
        return convert_seed(cmd, "pattern", opt_value(vals, "pattern"), errp);
    case CMD_WAIT_CONFIG_CHANGE:
        return convert_wait_timeout(cmd, vals, errp);
    case CMD_WAIT_FILE:
        if (!*pos[0]) {
            error_setg(errp, "wait-file: PATH must not be empty");
            return false;
        }
        cmd->what = g_strdup(pos[0]);
        return convert_wait_timeout(cmd, vals, errp);
    default:
        return true;
    }
}

/*
 * Parse one command starting at argv[*i]; advance *i past it.
 */
static Command *parse_one_command(int argc, char **argv, int *i,
                                  Error **errp)
{
    const CmdSpec *spec = find_cmd_spec(argv[*i]);
    g_autoptr(GHashTable) vals = g_hash_table_new_full(g_str_hash,
                                                       g_str_equal,
                                                       g_free, g_free);
    char *pos[2] = { NULL, NULL };
    Command *cmd;
    unsigned p;

    if (!spec) {
        error_setg(errp, "unknown command '%s' (see --help)", argv[*i]);
        return NULL;
    }
    (*i)++;
    for (p = 0; p < spec->npos; p++, (*i)++) {
        if (*i >= argc || find_cmd_spec(argv[*i]) ||
            g_str_has_prefix(argv[*i], "--")) {
            error_setg(errp, "%s: missing argument; usage: %s", spec->name,
                       spec->usage);
            return NULL;
        }
        pos[p] = argv[*i];
    }
    while (*i < argc && g_str_has_prefix(argv[*i], "--")) {
        g_autofree char *name = g_strdup(argv[*i] + 2);
        char *eq = strchr(name, '=');
        const CmdOption *opt;
        char *value = NULL;

        if (eq) {
            *eq = '\0';
            value = g_strdup(eq + 1);
        }
        for (opt = spec->options; opt->name; opt++) {
            if (!strcmp(opt->name, name)) {
                break;
            }
        }
        if (!opt->name) {
            error_setg(errp, "%s: unknown option '--%s'; usage: %s",
                       spec->name, name, spec->usage);
            g_free(value);
            return NULL;
        }
        (*i)++;
        if (opt->type == ARG_VALUE && !value) {
            if (*i >= argc) {
                error_setg(errp, "%s: --%s needs a value", spec->name, name);
                return NULL;
            }
            value = g_strdup(argv[(*i)++]);
        } else if (opt->type == ARG_FLAG && value) {
            error_setg(errp, "%s: --%s takes no value", spec->name, name);
            g_free(value);
            return NULL;
        }
        g_hash_table_insert(vals, g_strdup(name), value ? value : g_strdup(""));
    }
    if (*i < argc && !find_cmd_spec(argv[*i])) {
        error_setg(errp, "%s: unexpected argument '%s'; usage: %s",
                   spec->name, argv[*i], spec->usage);
        return NULL;
    }
    cmd = g_new0(Command, 1);
    cmd->kind = spec->kind;
    cmd->name = spec->name;
    if (!convert_command(cmd, pos, vals, errp)) {
        command_free(cmd);
        return NULL;
    }
    return cmd;
}

static bool parse_feature_list(const char *what, const char *list,
                               VufDeviceType dev, bool protocol,
                               uint64_t *mask, Error **errp)
{
    g_auto(GStrv) names = NULL;
    char **n;

    if (!list) {
        return true;
    }
    names = g_strsplit(list, ",", -1);
    for (n = names; *n; n++) {
        int bit = -1;
        unsigned b;

        if (protocol) {
            for (b = 0; b < 64; b++) {
                const char *name = vuf_protocol_feature_name(b);

                if (name && !g_ascii_strcasecmp(name, *n)) {
                    bit = b;
                    break;
                }
            }
        } else {
            bit = vuf_device_feature_by_name(dev, *n);
        }
        if (bit < 0) {
            error_setg(errp, "%s: unknown feature '%s' (names as `info` "
                       "prints them, e.g. %s)", what, *n,
                       protocol ? "REPLY_ACK" : "RING_EVENT_IDX");
            return false;
        }
        *mask |= VUF_BIT(bit);
    }
    return true;
}

typedef struct RawOpts {
    char *socket;
    char *queues;
    char *mem_size;
    char *queue_size;
    char *completion;
    char *segments;
    char *timeout;
    char *connect_timeout;
    char *disable_features;
    char *require_features;
    char *disable_protocol_features;
    char *device;
    gboolean json;
    gboolean indirect;
    gboolean mem_slots;
} RawOpts;

static void raw_opts_free(RawOpts *raw)
{
    g_free(raw->socket);
    g_free(raw->queues);
    g_free(raw->mem_size);
    g_free(raw->queue_size);
    g_free(raw->completion);
    g_free(raw->segments);
    g_free(raw->timeout);
    g_free(raw->connect_timeout);
    g_free(raw->disable_features);
    g_free(raw->require_features);
    g_free(raw->disable_protocol_features);
    g_free(raw->device);
}

static bool parse_seconds(const char *what, const char *str, double *out,
                          Error **errp)
{
    char *end;
    double v;

    if (!str) {
        return true;
    }
    v = g_ascii_strtod(str, &end);
    if (end == str || *end || !(v >= 0) || v > 86400) {
        error_setg(errp, "%s: expected seconds from 0 to 86400, got '%s'",
                   what, str);
        return false;
    }
    *out = v;
    return true;
}

static bool convert_global_opts(RawOpts *raw, ClientOpts *o, Error **errp)
{
    uint64_t v;

    if (!raw->socket) {
        error_setg(errp, "--socket PATH is required");
        return false;
    }
    o->socket = g_strdup(raw->socket);
    o->json = raw->json;
    o->indirect = raw->indirect;
    o->mem_slots = raw->mem_slots;
    if (raw->queues) {
        if (!parse_uint("--queues", raw->queues, 1, VUF_QUEUES_MAX, &v, errp)) {
            return false;
        }
        o->queues = v;
    }
    if (raw->mem_size &&
        !parse_size("--mem-size", raw->mem_size, &o->mem_size, errp)) {
        return false;
    }
    if (raw->queue_size) {
        if (!parse_uint("--queue-size", raw->queue_size, 1,
                        VUF_QUEUE_SIZE_MAX, &v, errp)) {
            return false;
        }
        o->queue_size = v;
    }
    if (raw->segments) {
        if (!parse_uint("--segments", raw->segments, 1, 64, &v, errp)) {
            return false;
        }
        o->segments = v;
    }
    if (raw->completion) {
        if (!strcmp(raw->completion, "poll")) {
            o->completion = VUF_COMPLETION_POLL;
        } else if (!strcmp(raw->completion, "interrupt")) {
            o->completion = VUF_COMPLETION_INTERRUPT;
        } else {
            error_setg(errp, "--completion: expected poll or interrupt, got "
                       "'%s'", raw->completion);
            return false;
        }
    }
    return parse_seconds("--timeout", raw->timeout, &o->timeout_s, errp) &&
           parse_seconds("--connect-timeout", raw->connect_timeout,
                         &o->connect_timeout_s, errp);
}

/*
 * The device: --device if given, else virtio-scsi if a scsi-* command is
 * on the line, else virtio-blk; a command for the other device is an
 * error.  Then the feature lists, whose names depend on the device.
 */
static bool convert_device(RawOpts *raw, ClientOpts *o, Error **errp)
{
    CmdDevice want = CMD_DEV_ANY;
    guint i;

    if (raw->device) {
        if (!strcmp(raw->device, "blk")) {
            want = CMD_DEV_BLK;
        } else if (!strcmp(raw->device, "scsi")) {
            want = CMD_DEV_SCSI;
        } else {
            error_setg(errp, "--device: expected blk or scsi, got '%s'",
                       raw->device);
            return false;
        }
    }
    for (i = 0; i < o->commands->len; i++) {
        const Command *cmd = o->commands->pdata[i];
        CmdDevice dev = command_device(cmd->kind);

        if (dev == CMD_DEV_ANY) {
            continue;
        }
        if (want == CMD_DEV_ANY) {
            want = dev;
        } else if (dev != want) {
            error_setg(errp, "%s is a virtio-%s command, but the device is "
                       "virtio-%s (%s)", cmd->name,
                       dev == CMD_DEV_SCSI ? "scsi" : "blk",
                       want == CMD_DEV_SCSI ? "scsi" : "blk",
                       raw->device ? "--device" : "an earlier command");
            return false;
        }
    }
    o->device = want == CMD_DEV_SCSI ? VUF_DEVICE_SCSI : VUF_DEVICE_BLK;
    return parse_feature_list("--disable-feature", raw->disable_features,
                              o->device, false, &o->features_disabled,
                              errp) &&
           parse_feature_list("--require-feature", raw->require_features,
                              o->device, false, &o->features_required,
                              errp) &&
           parse_feature_list("--disable-protocol-feature",
                              raw->disable_protocol_features, o->device,
                              true, &o->protocol_features_disabled, errp);
}

static const char *help_description(void)
{
    static char *text;

    if (!text) {
        GString *s = g_string_new("Commands (run in order, in one session):"
                                  "\n");
        g_autofree char *kinds = malformed_kinds();
        size_t i;

        for (i = 0; i < G_N_ELEMENTS(cmd_specs); i++) {
            g_string_append_printf(s, "  %s\n", cmd_specs[i].usage);
        }
        g_string_append_printf(s,
            "\nOFFSET, LEN and BYTES take k, M, G suffixes (binary); I/O is in "
            "512-byte\nsectors.  write --pattern SEED writes the pattern of "
            "docs/frontend.md (default\nseed 1); read --verify SEED checks "
            "it.  reconnect starts a new session and\nverifies everything "
            "written or zeroed so far.  malformed KIND is one of:\n  %s\n"
            "\nscsi-* commands talk to a virtio-scsi device (--device scsi): "
            "--queues and\n--queue count request queues, --lun picks the LUN "
            "(default 0), and a\ncommand fails unless the status is GOOD, "
            "or with --expect-sense KEY,\nCHECK CONDITION with that sense "
            "key.\n"
            "\nget-config reads the device config again (GET_CONFIG); "
            "wait-config-change\nwaits for the back-end's config-change "
            "message (a resized disk) on the\nback-end channel, then does "
            "the same; wait-file PATH waits until PATH\nexists, so that a "
            "test can act between two commands of one session.\n"
            "--timeout defaults to the global --timeout.\n"
            "\nExit status: 0 success, 1 a command failed (I/O error, data "
            "mismatch,\nprotocol error), 2 bad command line.", kinds);
        text = g_string_free(s, FALSE);
    }
    return text;
}

bool parse_command_line(int argc, char **argv, ClientOpts *o, Error **errp)
{
    RawOpts raw = { 0 };
    GOptionEntry entries[] = {
        { "socket", 's', 0, G_OPTION_ARG_STRING, &raw.socket,
          "vhost-user socket of the back-end (required)", "PATH" },
        { "queues", 'q', 0, G_OPTION_ARG_STRING, &raw.queues,
          "Queues to set up (default 1, or what the commands use)", "N" },
        { "device", 0, 0, G_OPTION_ARG_STRING, &raw.device,
          "blk or scsi (default: scsi if a scsi-* command is given, else "
          "blk)", "TYPE" },
        { "json", 0, 0, G_OPTION_ARG_NONE, &raw.json,
          "Print one JSON object with every command's result", NULL },
        { "mem-size", 0, 0, G_OPTION_ARG_STRING, &raw.mem_size,
          "Guest memory size (default 64M)", "BYTES" },
        { "queue-size", 0, 0, G_OPTION_ARG_STRING, &raw.queue_size,
          "Descriptors per queue, a power of 2 (default 256)", "N" },
        { "completion", 0, 0, G_OPTION_ARG_STRING, &raw.completion,
          "poll (spin on the used ring, the default) or interrupt (block "
          "on the call eventfd)", "MODE" },
        { "indirect", 0, 0, G_OPTION_ARG_NONE, &raw.indirect,
          "Put each request in an indirect descriptor table", NULL },
        { "segments", 0, 0, G_OPTION_ARG_STRING, &raw.segments,
          "Data descriptors per request (default 1)", "N" },
        { "timeout", 0, 0, G_OPTION_ARG_STRING, &raw.timeout,
          "Give up on a reply or a request after this long (default 30)",
          "SECONDS" },
        { "connect-timeout", 0, 0, G_OPTION_ARG_STRING, &raw.connect_timeout,
          "Keep retrying to connect this long (default 0)", "SECONDS" },
        { "mem-slots", 0, 0, G_OPTION_ARG_NONE, &raw.mem_slots,
          "Share memory with ADD_MEM_REG (needs CONFIGURE_MEM_SLOTS) "
          "instead of SET_MEM_TABLE", NULL },
        { "disable-feature", 0, 0, G_OPTION_ARG_STRING, &raw.disable_features,
          "Do not accept these features, e.g. RING_EVENT_IDX,BLK_MQ",
          "LIST" },
        { "require-feature", 0, 0, G_OPTION_ARG_STRING,
          &raw.require_features,
          "Fail unless the back-end offers these features", "LIST" },
        { "disable-protocol-feature", 0, 0, G_OPTION_ARG_STRING,
          &raw.disable_protocol_features,
          "Do not accept these protocol features, e.g. REPLY_ACK", "LIST" },
        { NULL }
    };
    g_autoptr(GOptionContext) ctx =
        g_option_context_new("COMMAND [ARGS] [COMMAND [ARGS]...]");
    bool ok;
    int i;

    g_option_context_set_summary(ctx,
        "A guest-less vhost-user-blk and vhost-user-scsi front-end: connects "
        "to a\nback-end's socket, negotiates like QEMU, and runs the commands "
        "below through\nshared-memory virtqueues.");
    g_option_context_set_description(ctx, help_description());
    g_option_context_add_main_entries(ctx, entries, NULL);
    g_option_context_set_strict_posix(ctx, TRUE);
    ok = g_option_context_parse(ctx, &argc, &argv, errp);
    if (ok) {
        ok = convert_global_opts(&raw, o, errp);
    }
    if (ok && argc < 2) {
        error_setg(errp, "no command given (see --help)");
        ok = false;
    }
    for (i = 1; ok && i < argc; ) {
        Command *cmd = parse_one_command(argc, argv, &i, errp);

        if (!cmd) {
            ok = false;
            break;
        }
        g_ptr_array_add(o->commands, cmd);
    }
    if (ok) {
        ok = convert_device(&raw, o, errp);
    }
    raw_opts_free(&raw);
    return ok;
}

