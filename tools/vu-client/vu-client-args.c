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
 *
 * Three tables drive it:
 * - global_opts: the global options, their help, and how each value is
 *   converted into ClientOpts;
 * - opt_specs: every command option by name, how its value is converted
 *   and which Command field it sets (an option means the same in every
 *   command that takes it);
 * - cmd_specs: every command: its kind, device, handler, usage, the
 *   options it takes, and a function for its positional arguments and the
 *   checks that involve more than one option.
 */

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include <glib.h>

#include "util/cli-parse.h"
#include "util/error.h"
#include "vu-client-args.h"
#include "vu-client-bad.h"
#include "vu-client-blk.h"
#include "vu-client-ctl.h"
#include "vu-client-inflight.h"
#include "vu-client-log.h"
#include "vu-client-run.h"
#include "vu-client-scsi.h"
#include "vu-client-scsi-run.h"

#define SECTOR              VIRTIO_BLK_SECTOR_SIZE
#define CMD_OPTIONS_MAX     10

/* ------------------------------------------------------------------------ */
/* Values                                                                    */

static bool parse_sense_key(const char *what, const char *str, int *out,
                            Error **errp)
{
    *out = scsi_sense_key_by_name(str);
    if (*out < 0) {
        error_setg(errp, "%s: unknown sense key '%s' (a name such as "
                   "DATA_PROTECT or UNIT_ATTENTION, or a number from 0 to "
                   "15)", what, str);
        return false;
    }
    return true;
}

/* A CDB length: 10 or 16 (bytes). */
static bool parse_cdb(const char *what, const char *str, unsigned *out,
                      Error **errp)
{
    static const char *const lengths[] = { "10", "16" };
    int i;

    if (!cli_parse_choice(what, str, lengths, G_N_ELEMENTS(lengths), &i,
                          errp)) {
        return false;
    }
    *out = i ? 16 : 10;
    return true;
}

/* How an option's value is converted, and what it sets. */
typedef enum OptConv {
    OPT_FLAG,                   /* no value: a bool set to true */
    OPT_UINT,                   /* an unsigned from min to max */
    OPT_U64,                    /* a uint64_t from min to max */
    OPT_INT,                    /* an int from min to max */
    OPT_SIZE,                   /* a uint64_t byte count */
    OPT_STRING,                 /* a char *, copied */
    OPT_SECONDS,                /* a double from 0 to max */
    OPT_CDB,                    /* an unsigned, 10 or 16 */
    OPT_SENSE_KEY,              /* an int: a sense key's name or number */
} OptConv;

typedef struct OptSpec {
    const char *name;
    OptConv conv;
    uint64_t min, max;
    size_t field;               /* offset of what it sets */
    size_t have;                /* offset of a bool set when given, or 0 */
} OptSpec;

/*
 * Convert str as spec says into the field of base (a Command or the
 * ClientOpts); what names the option in errors.
 */
static bool convert_value(const OptSpec *spec, const char *what,
                          const char *str, void *base, Error **errp)
{
    void *field = (char *)base + spec->field;
    uint64_t v = 0;

    if (spec->have) {
        *(bool *)((char *)base + spec->have) = true;
    }
    switch (spec->conv) {
    case OPT_FLAG:
        *(bool *)field = true;
        return true;
    case OPT_STRING:
        *(char **)field = g_strdup(str);
        return true;
    case OPT_SIZE:
        return cli_parse_size(what, str, field, errp);
    case OPT_SECONDS:
        return cli_parse_seconds(what, str, spec->max, field, errp);
    case OPT_SENSE_KEY:
        return parse_sense_key(what, str, field, errp);
    case OPT_CDB:
        return parse_cdb(what, str, field, errp);
    default:
        break;
    }
    if (!cli_parse_uint(what, str, spec->min, spec->max, &v, errp)) {
        return false;
    }
    if (spec->conv == OPT_U64) {
        *(uint64_t *)field = v;
    } else if (spec->conv == OPT_INT) {
        *(int *)field = v;
    } else {
        *(unsigned *)field = v;
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* Command options                                                           */

#define CMD_FIELD(f)        offsetof(Command, f)

static const OptSpec opt_specs[] = {
    { "queue", OPT_UINT, 0, VUF_QUEUES_MAX - 1, CMD_FIELD(queue), 0 },
    { "pattern", OPT_U64, 0, UINT64_MAX, CMD_FIELD(seed),
      CMD_FIELD(have_seed) },
    { "verify", OPT_U64, 0, UINT64_MAX, CMD_FIELD(seed),
      CMD_FIELD(have_seed) },
    { "seed", OPT_U64, 0, UINT64_MAX, CMD_FIELD(seed), CMD_FIELD(have_seed) },
    { "expect-zeroes", OPT_FLAG, 0, 0, CMD_FIELD(expect_zeroes), 0 },
    { "output", OPT_STRING, 0, 0, CMD_FIELD(output), 0 },
    { "unmap", OPT_FLAG, 0, 0, CMD_FIELD(unmap), 0 },
    { "fua", OPT_FLAG, 0, 0, CMD_FIELD(fua), 0 },
    { "no-wait", OPT_FLAG, 0, 0, CMD_FIELD(no_wait), 0 },
    { "size", OPT_SIZE, 0, 0, CMD_FIELD(size), 0 },
    { "count", OPT_U64, 1, 1000000000, CMD_FIELD(count), 0 },
    { "queues", OPT_UINT, 1, VUF_QUEUES_MAX, CMD_FIELD(run_queues), 0 },
    { "bs", OPT_SIZE, 0, 0, CMD_FIELD(bs), 0 },
    { "iodepth", OPT_U64, 1, 1024, CMD_FIELD(iodepth), 0 },
    { "offset", OPT_SIZE, 0, 0, CMD_FIELD(offset), 0 },
    { "timeout", OPT_SECONDS, 0, 86400, CMD_FIELD(wait_s), 0 },
    { "wait", OPT_SECONDS, 0, 3600, CMD_FIELD(wait_s), 0 },
    { "lun", OPT_UINT, 0, 16383, CMD_FIELD(lun), 0 },
    { "evpd", OPT_INT, 0, 255, CMD_FIELD(evpd_page), 0 },
    { "cdb", OPT_CDB, 0, 0, CMD_FIELD(cdb_bits), 0 },
    { "expect-sense", OPT_SENSE_KEY, 0, 0, CMD_FIELD(expect_sense), 0 },
    { "tag", OPT_U64, 0, UINT64_MAX, CMD_FIELD(tag), CMD_FIELD(have_tag) },
    { "events", OPT_U64, 0, UINT32_MAX, CMD_FIELD(events), 0 },
};

#undef CMD_FIELD

static const OptSpec *find_opt_spec(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(opt_specs); i++) {
        if (!strcmp(opt_specs[i].name, name)) {
            return &opt_specs[i];
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Positional arguments and checks of several options                        */

/* What a command's positional arguments are. */
typedef enum CmdArgs {
    ARGS_NONE,
    ARGS_BLK_IO,                /* OFFSET LEN: bytes, whole sectors */
    ARGS_SCSI_IO,               /* OFFSET LEN: bytes, whole blocks (checked
                                 * against the LUN when it runs) */
    ARGS_KIND,                  /* KIND: one of CmdSpec.kinds() */
    ARGS_PATH,                  /* PATH: not empty */
    ARGS_LBA_COUNT,             /* LBA COUNT: blocks */
} CmdArgs;

/* A check that involves more than one option; vals: those given. */
typedef bool (*CmdCheck)(Command *cmd, GHashTable *vals, Error **errp);

/* OFFSET and LEN into cmd; unit names their alignment in the error. */
static bool convert_offset_len(Command *cmd, char **pos, const char *unit,
                               Error **errp)
{
    g_autofree char *w_off = g_strdup_printf("%s OFFSET", cmd->name);
    g_autofree char *w_len = g_strdup_printf("%s LEN", cmd->name);

    if (!cli_parse_size(w_off, pos[0], &cmd->offset, errp) ||
        !cli_parse_size(w_len, pos[1], &cmd->len, errp)) {
        return false;
    }
    if (cmd->offset % SECTOR || cmd->len % SECTOR || cmd->len == 0) {
        error_setg(errp, "%s: OFFSET and LEN must be multiples of %s and LEN "
                   "non-zero (got %" PRIu64 " and %" PRIu64 ")", cmd->name,
                   unit, cmd->offset, cmd->len);
        return false;
    }
    return true;
}

/* A read's --verify and --expect-zeroes exclude each other. */
static bool check_read(Command *cmd, GHashTable *vals, Error **errp)
{
    if (cmd->expect_zeroes && cmd->have_seed) {
        error_setg(errp, "%s: --verify and --expect-zeroes exclude each "
                   "other", cmd->name);
        return false;
    }
    return true;
}

/* write --no-wait sends one request: LEN must fit its buffer. */
static bool check_write(Command *cmd, GHashTable *vals, Error **errp)
{
    if (cmd->no_wait && cmd->len > CHUNK_MAX) {
        error_setg(errp, "%s --no-wait: LEN is at most %u bytes (one "
                   "request)", cmd->name, CHUNK_MAX);
        return false;
    }
    return true;
}

/* discard and write-zeroes: the sector count must fit 32 bits. */
static bool check_dwz(Command *cmd, GHashTable *vals, Error **errp)
{
    if (cmd->len / SECTOR > UINT32_MAX) {
        error_setg(errp, "%s: LEN is at most %" PRIu64 " bytes",
                   cmd->name, (uint64_t)UINT32_MAX * SECTOR);
        return false;
    }
    return true;
}

/* --offset (bad-request, the verify runs) in whole sectors. */
static bool check_offset(Command *cmd, GHashTable *vals, Error **errp)
{
    if (cmd->offset % SECTOR) {
        error_setg(errp, "%s --offset must be a multiple of %u", cmd->name,
                   SECTOR);
        return false;
    }
    return true;
}

static bool check_verify_run(Command *cmd, GHashTable *vals, Error **errp)
{
    if (!g_hash_table_contains(vals, "size") ||
        !g_hash_table_contains(vals, "count")) {
        error_setg(errp, "%s needs --size BYTES and --count N", cmd->name);
        return false;
    }
    if (cmd->bs % SECTOR || cmd->bs == 0 || cmd->bs > RUN_BS_MAX) {
        error_setg(errp, "%s --bs must be a non-zero multiple of %u up to "
                   "16M, got %" PRIu64, cmd->name, SECTOR, cmd->bs);
        return false;
    }
    return check_offset(cmd, vals, errp);
}

/* log-start --size: whole 64-bit words of log (0 is not given). */
static bool check_log_start(Command *cmd, GHashTable *vals, Error **errp)
{
    if (g_hash_table_contains(vals, "size") &&
        (cmd->size == 0 || cmd->size % sizeof(uint64_t))) {
        error_setg(errp, "%s --size must be a non-zero multiple of 8, got %"
                   PRIu64, cmd->name, cmd->size);
        return false;
    }
    return true;
}

static bool scsi_tmf_kind_valid(const char *name)
{
    return vufscsi_tmf_by_name(name) >= 0;
}

static char *scsi_tmf_kinds(void)
{
    GString *s = g_string_new(NULL);
    const char *name;

    for (uint32_t i = 0; (name = vufscsi_tmf_name(i)); i++) {
        g_string_append_printf(s, "%s%s", i ? ", " : "", name);
    }
    return g_string_free(s, FALSE);
}

/* ------------------------------------------------------------------------ */
/* Commands                                                                  */

typedef struct CmdSpec {
    const char *name;
    CmdKind kind;
    CmdDevice device;
    CmdRun run;
    const char *usage;
    CmdArgs args;               /* positional arguments */
    /* ARGS_KIND: the kinds the command accepts, for checks and errors. */
    bool (*kind_valid)(const char *name);
    char *(*kinds)(void);
    CmdCheck check;             /* after the conversions; or NULL */
    const char *options[CMD_OPTIONS_MAX];   /* names in opt_specs */
} CmdSpec;

static const CmdSpec cmd_specs[] = {
    { "info", CMD_INFO, CMD_DEV_ANY, cmd_info, "info" },
    { "get-id", CMD_GET_ID, CMD_DEV_BLK, cmd_get_id, "get-id [--queue Q]",
      .options = { "queue" } },
    { "write", CMD_WRITE, CMD_DEV_BLK, cmd_write,
      "write OFFSET LEN [--pattern SEED] [--no-wait] [--queue Q]",
      ARGS_BLK_IO, .check = check_write,
      .options = { "pattern", "no-wait", "queue" } },
    { "read", CMD_READ, CMD_DEV_BLK, cmd_read,
      "read OFFSET LEN [--verify SEED | --expect-zeroes] [--output FILE] "
      "[--queue Q]", ARGS_BLK_IO, .check = check_read,
      .options = { "verify", "expect-zeroes", "output", "queue" } },
    { "flush", CMD_FLUSH, CMD_DEV_BLK, cmd_flush, "flush [--queue Q]",
      .options = { "queue" } },
    { "discard", CMD_DISCARD, CMD_DEV_BLK, cmd_dwz,
      "discard OFFSET LEN [--queue Q]", ARGS_BLK_IO, .check = check_dwz,
      .options = { "queue" } },
    { "write-zeroes", CMD_WRITE_ZEROES, CMD_DEV_BLK, cmd_dwz,
      "write-zeroes OFFSET LEN [--unmap] [--queue Q]", ARGS_BLK_IO,
      .check = check_dwz, .options = { "unmap", "queue" } },
    { "verify-run", CMD_VERIFY_RUN, CMD_DEV_BLK, cmd_verify_run,
      "verify-run --size BYTES --count N [--queues N] [--bs BYTES] "
      "[--iodepth N] [--seed S] [--offset BYTES]", .check = check_verify_run,
      .options = { "size", "count", "queues", "bs", "iodepth", "seed",
                   "offset" } },
    { "reconnect", CMD_RECONNECT, CMD_DEV_ANY, cmd_reconnect, "reconnect" },
    { "stop", CMD_STOP, CMD_DEV_ANY, cmd_stop, "stop" },
    { "malformed", CMD_MALFORMED, CMD_DEV_ANY, cmd_malformed,
      "malformed KIND [--queue Q]", ARGS_KIND, malformed_kind_valid,
      malformed_kinds, .options = { "queue" } },
    { "stats", CMD_STATS, CMD_DEV_ANY, cmd_stats, "stats" },
    { "bad-request", CMD_BAD_REQUEST, CMD_DEV_BLK, cmd_bad_request,
      "bad-request KIND [--offset BYTES] [--pattern SEED] [--queue Q]",
      ARGS_KIND, bad_request_kind_valid, bad_request_kinds, check_offset,
      { "offset", "pattern", "queue" } },
    { "get-config", CMD_GET_CONFIG, CMD_DEV_ANY, cmd_get_config,
      "get-config" },
    { "wait-config-change", CMD_WAIT_CONFIG_CHANGE, CMD_DEV_ANY,
      cmd_wait_config_change, "wait-config-change [--timeout SECONDS]",
      .options = { "timeout" } },
    { "wait-file", CMD_WAIT_FILE, CMD_DEV_ANY, cmd_wait_file,
      "wait-file PATH [--timeout SECONDS]", ARGS_PATH,
      .options = { "timeout" } },
    { "touch", CMD_TOUCH, CMD_DEV_ANY, cmd_touch, "touch PATH", ARGS_PATH },
    { "resume", CMD_RESUME, CMD_DEV_ANY, cmd_resume,
      "resume [--timeout SECONDS]", .options = { "timeout" } },
    { "log-start", CMD_LOG_START, CMD_DEV_ANY, cmd_log_start,
      "log-start [--size BYTES]", .check = check_log_start,
      .options = { "size" } },
    { "log-stop", CMD_LOG_STOP, CMD_DEV_ANY, cmd_log_stop, "log-stop" },
    { "log-dirty", CMD_LOG_DIRTY, CMD_DEV_ANY, cmd_log_dirty, "log-dirty" },
    /* virtio-scsi; --queue Q is request queue Q (virtqueue 2 + Q). */
    { "scsi-inquiry", CMD_SCSI_INQUIRY, CMD_DEV_SCSI, cmd_scsi_inquiry,
      "scsi-inquiry [--lun N] [--evpd PAGE] [--queue Q]",
      .options = { "lun", "evpd", "queue" } },
    { "scsi-read-capacity", CMD_SCSI_READ_CAPACITY, CMD_DEV_SCSI,
      cmd_scsi_read_capacity, "scsi-read-capacity [--lun N] [--cdb 10|16] "
      "[--expect-sense KEY] [--queue Q]",
      .options = { "lun", "cdb", "expect-sense", "queue" } },
    { "scsi-report-luns", CMD_SCSI_REPORT_LUNS, CMD_DEV_SCSI,
      cmd_scsi_report_luns, "scsi-report-luns [--lun N] [--queue Q]",
      .options = { "lun", "queue" } },
    { "scsi-tur", CMD_SCSI_TUR, CMD_DEV_SCSI, cmd_scsi_tur,
      "scsi-tur [--lun N] [--expect-sense KEY] [--queue Q]",
      .options = { "lun", "expect-sense", "queue" } },
    { "scsi-read", CMD_SCSI_READ, CMD_DEV_SCSI, cmd_scsi_read,
      "scsi-read OFFSET LEN [--lun N] [--verify SEED | --expect-zeroes] "
      "[--cdb 10|16] [--expect-sense KEY] [--queue Q]", ARGS_SCSI_IO,
      .check = check_read,
      .options = { "lun", "verify", "expect-zeroes", "cdb", "expect-sense",
                   "queue" } },
    { "scsi-write", CMD_SCSI_WRITE, CMD_DEV_SCSI, cmd_scsi_write,
      "scsi-write OFFSET LEN [--lun N] [--pattern SEED] [--cdb 10|16] "
      "[--fua] [--expect-sense KEY] [--no-wait] [--queue Q]", ARGS_SCSI_IO,
      .check = check_write,
      .options = { "lun", "pattern", "cdb", "fua", "expect-sense",
                   "no-wait", "queue" } },
    { "scsi-unmap", CMD_SCSI_UNMAP, CMD_DEV_SCSI, cmd_scsi_unmap,
      "scsi-unmap LBA COUNT [--lun N] [--expect-sense KEY] [--queue Q]",
      ARGS_LBA_COUNT, .options = { "lun", "expect-sense", "queue" } },
    { "scsi-sync", CMD_SCSI_SYNC, CMD_DEV_SCSI, cmd_scsi_sync,
      "scsi-sync [--lun N] [--queue Q]", .options = { "lun", "queue" } },
    { "scsi-tmf", CMD_SCSI_TMF, CMD_DEV_SCSI, cmd_scsi_tmf,
      "scsi-tmf KIND [--lun N] [--tag T]", ARGS_KIND, scsi_tmf_kind_valid,
      scsi_tmf_kinds, .options = { "lun", "tag" } },
    { "scsi-an-query", CMD_SCSI_AN_QUERY, CMD_DEV_SCSI, cmd_scsi_an_query,
      "scsi-an-query [--lun N] [--events MASK]",
      .options = { "lun", "events" } },
    { "scsi-events", CMD_SCSI_EVENTS, CMD_DEV_SCSI, cmd_scsi_events,
      "scsi-events [--wait SECONDS]", .options = { "wait" } },
    { "scsi-verify-run", CMD_SCSI_VERIFY_RUN, CMD_DEV_SCSI,
      cmd_scsi_verify_run, "scsi-verify-run --size BYTES --count N "
      "[--lun N] [--queues N] [--bs BYTES] [--iodepth N] [--seed S] "
      "[--offset BYTES] [--cdb 10|16]", .check = check_verify_run,
      .options = { "size", "count", "queues", "bs", "iodepth", "seed",
                   "offset", "lun", "cdb" } },
    { "scsi-bad-request", CMD_SCSI_BAD_REQUEST, CMD_DEV_SCSI,
      cmd_scsi_bad_request, "scsi-bad-request KIND [--lun N] [--queue Q]",
      ARGS_KIND, scsi_bad_request_kind_valid, scsi_bad_request_kinds,
      .options = { "lun", "queue" } },
};

/* How many positional arguments args are. */
static unsigned args_count(CmdArgs args)
{
    switch (args) {
    case ARGS_NONE:
        return 0;
    case ARGS_KIND:
    case ARGS_PATH:
        return 1;
    default:
        return 2;
    }
}

/* The positional arguments pos[] into cmd, as spec->args says. */
static bool convert_args(const CmdSpec *spec, Command *cmd, char **pos,
                         Error **errp)
{
    g_autofree char *names = NULL;

    switch (spec->args) {
    case ARGS_BLK_IO:
        return convert_offset_len(cmd, pos, "512", errp);
    case ARGS_SCSI_IO:
        return convert_offset_len(cmd, pos,
                                  "the LUN's block size (512 or 4096)", errp);
    case ARGS_LBA_COUNT:
        return cli_parse_uint("scsi-unmap LBA", pos[0], 0, UINT64_MAX,
                              &cmd->lba, errp) &&
               cli_parse_uint("scsi-unmap COUNT", pos[1], 1, UINT32_MAX,
                              &cmd->nblocks, errp);
    case ARGS_PATH:
        if (!*pos[0]) {
            error_setg(errp, "%s: PATH must not be empty", cmd->name);
            return false;
        }
        cmd->what = g_strdup(pos[0]);
        return true;
    case ARGS_KIND:
        cmd->what = g_strdup(pos[0]);
        if (spec->kind_valid(cmd->what)) {
            return true;
        }
        names = spec->kinds();
        error_setg(errp, "%s: unknown kind '%s'; expected one of: %s",
                   cmd->name, cmd->what, names);
        return false;
    default:
        return true;
    }
}

static const CmdSpec *find_cmd_spec(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(cmd_specs); i++) {
        if (!strcmp(cmd_specs[i].name, name)) {
            return &cmd_specs[i];
        }
    }
    return NULL;
}

static bool spec_takes_option(const CmdSpec *spec, const char *name)
{
    for (unsigned i = 0; i < CMD_OPTIONS_MAX && spec->options[i]; i++) {
        if (!strcmp(spec->options[i], name)) {
            return true;
        }
    }
    return false;
}

/*
 * The --options of spec's command from argv[*i] up to the next word that
 * is not one, into vals (name -> value, "" for a flag); *i moves past them.
 */
static bool take_options(const CmdSpec *spec, int argc, char **argv, int *i,
                         GHashTable *vals, Error **errp)
{
    while (*i < argc && g_str_has_prefix(argv[*i], "--")) {
        g_autofree char *name = g_strdup(argv[*i] + 2);
        char *eq = strchr(name, '=');
        const OptSpec *opt;

        if (eq) {
            *eq = '\0';
        }
        opt = find_opt_spec(name);
        if (!opt || !spec_takes_option(spec, name)) {
            error_setg(errp, "%s: unknown option '--%s'; usage: %s",
                       spec->name, name, spec->usage);
            return false;
        }
        (*i)++;
        if (opt->conv == OPT_FLAG && eq) {
            error_setg(errp, "%s: --%s takes no value", spec->name, name);
            return false;
        }
        if (opt->conv != OPT_FLAG && !eq && *i >= argc) {
            error_setg(errp, "%s: --%s needs a value", spec->name, name);
            return false;
        }
        g_hash_table_insert(vals, g_strdup(name),
                            g_strdup(opt->conv == OPT_FLAG ? ""
                                     : eq ? eq + 1 : argv[(*i)++]));
    }
    return true;
}

/* The options in vals into cmd, in the order of opt_specs. */
static bool convert_options(Command *cmd, GHashTable *vals, Error **errp)
{
    for (size_t i = 0; i < G_N_ELEMENTS(opt_specs); i++) {
        const OptSpec *opt = &opt_specs[i];
        const char *str = g_hash_table_lookup(vals, opt->name);
        g_autofree char *what = NULL;

        if (!str) {
            continue;
        }
        what = g_strdup_printf("%s --%s", cmd->name, opt->name);
        if (!convert_value(opt, what, str, cmd, errp)) {
            return false;
        }
    }
    return true;
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

    if (!spec) {
        error_setg(errp, "unknown command '%s' (see --help)", argv[*i]);
        return NULL;
    }
    (*i)++;
    for (unsigned p = 0; p < args_count(spec->args); p++, (*i)++) {
        if (*i >= argc || find_cmd_spec(argv[*i]) ||
            g_str_has_prefix(argv[*i], "--")) {
            error_setg(errp, "%s: missing argument; usage: %s", spec->name,
                       spec->usage);
            return NULL;
        }
        pos[p] = argv[*i];
    }
    if (!take_options(spec, argc, argv, i, vals, errp)) {
        return NULL;
    }
    if (*i < argc && !find_cmd_spec(argv[*i])) {
        error_setg(errp, "%s: unexpected argument '%s'; usage: %s",
                   spec->name, argv[*i], spec->usage);
        return NULL;
    }
    cmd = command_new(spec->kind, spec->name, spec->device, spec->run);
    if (!convert_options(cmd, vals, errp) ||
        !convert_args(spec, cmd, pos, errp) ||
        (spec->check && !spec->check(cmd, vals, errp))) {
        command_free(cmd);
        return NULL;
    }
    return cmd;
}

/* ------------------------------------------------------------------------ */
/* Global options                                                            */

/* A global option: GOption's view of it, and how its value converts. */
typedef struct GlobalOpt {
    const char *name;
    char short_name;
    GOptionArg arg;             /* G_OPTION_ARG_STRING or _NONE */
    const char *help;
    const char *arg_help;
    OptSpec conv;               /* into ClientOpts; .name NULL: by hand */
} GlobalOpt;

#define OPTS_FIELD(f)       offsetof(ClientOpts, f)

static const GlobalOpt global_opts[] = {
    { "socket", 's', G_OPTION_ARG_STRING,
      "vhost-user socket of the back-end (required)", "PATH",
      { "socket", OPT_STRING, 0, 0, OPTS_FIELD(socket), 0 } },
    { "queues", 'q', G_OPTION_ARG_STRING,
      "Queues to set up (default 1, or what the commands use)", "N",
      { "queues", OPT_UINT, 1, VUF_QUEUES_MAX, OPTS_FIELD(queues), 0 } },
    { "device", 0, G_OPTION_ARG_STRING,
      "blk or scsi (default: scsi if a scsi-* command is given, else blk)",
      "TYPE" },
    { "json", 0, G_OPTION_ARG_NONE,
      "Print one JSON object with every command's result", NULL,
      { "json", OPT_FLAG, 0, 0, OPTS_FIELD(json), 0 } },
    { "mem-size", 0, G_OPTION_ARG_STRING, "Guest memory size (default 64M)",
      "BYTES", { "mem-size", OPT_SIZE, 0, 0, OPTS_FIELD(mem_size), 0 } },
    { "queue-size", 0, G_OPTION_ARG_STRING,
      "Descriptors per queue, a power of 2 (default 256)", "N",
      { "queue-size", OPT_UINT, 1, VUF_QUEUE_SIZE_MAX,
        OPTS_FIELD(queue_size), 0 } },
    { "completion", 0, G_OPTION_ARG_STRING,
      "poll (spin on the used ring, the default) or interrupt (block on the "
      "call eventfd)", "MODE" },
    { "indirect", 0, G_OPTION_ARG_NONE,
      "Put each request in an indirect descriptor table", NULL,
      { "indirect", OPT_FLAG, 0, 0, OPTS_FIELD(indirect), 0 } },
    { "segments", 0, G_OPTION_ARG_STRING,
      "Data descriptors per request (default 1)", "N",
      { "segments", OPT_UINT, 1, 64, OPTS_FIELD(segments), 0 } },
    { "timeout", 0, G_OPTION_ARG_STRING,
      "Give up on a reply or a request after this long (default 30)",
      "SECONDS",
      { "timeout", OPT_SECONDS, 0, 86400, OPTS_FIELD(timeout_s), 0 } },
    { "connect-timeout", 0, G_OPTION_ARG_STRING,
      "Keep retrying to connect this long (default 0)", "SECONDS",
      { "connect-timeout", OPT_SECONDS, 0, 86400,
        OPTS_FIELD(connect_timeout_s), 0 } },
    { "mem-slots", 0, G_OPTION_ARG_NONE,
      "Share memory with ADD_MEM_REG (needs CONFIGURE_MEM_SLOTS) instead of "
      "SET_MEM_TABLE", NULL,
      { "mem-slots", OPT_FLAG, 0, 0, OPTS_FIELD(mem_slots), 0 } },
    { "disable-feature", 0, G_OPTION_ARG_STRING,
      "Do not accept these features, e.g. RING_EVENT_IDX,BLK_MQ", "LIST" },
    { "require-feature", 0, G_OPTION_ARG_STRING,
      "Fail unless the back-end offers these features", "LIST" },
    { "disable-protocol-feature", 0, G_OPTION_ARG_STRING,
      "Do not accept these protocol features, e.g. REPLY_ACK", "LIST" },
};

#undef OPTS_FIELD

#define GLOBAL_OPTS         G_N_ELEMENTS(global_opts)

/* What GOption found: global_opts[i]'s string, or whether it was given. */
typedef struct RawOpts {
    char *str[GLOBAL_OPTS];
    gboolean given[GLOBAL_OPTS];
} RawOpts;

/* The value of global option name, or NULL. */
static const char *raw_value(const RawOpts *raw, const char *name)
{
    for (size_t i = 0; i < GLOBAL_OPTS; i++) {
        if (!strcmp(global_opts[i].name, name)) {
            return raw->str[i];
        }
    }
    g_assert_not_reached();
}

static void raw_opts_free(RawOpts *raw)
{
    for (size_t i = 0; i < GLOBAL_OPTS; i++) {
        g_free(raw->str[i]);
    }
}

/* GOption's entries for global_opts, writing into raw.  Caller frees. */
static GOptionEntry *global_entries(RawOpts *raw)
{
    GOptionEntry *e = g_new0(GOptionEntry, GLOBAL_OPTS + 1);

    for (size_t i = 0; i < GLOBAL_OPTS; i++) {
        const GlobalOpt *g = &global_opts[i];

        e[i] = (GOptionEntry) {
            g->name, g->short_name, 0, g->arg,
            g->arg == G_OPTION_ARG_NONE ? (void *)&raw->given[i]
                                        : (void *)&raw->str[i],
            g->help, g->arg_help,
        };
    }
    return e;
}

static bool convert_global_opts(const RawOpts *raw, ClientOpts *o,
                                Error **errp)
{
    const char *completion = raw_value(raw, "completion");
    int mode;

    if (!raw_value(raw, "socket")) {
        error_setg(errp, "--socket PATH is required");
        return false;
    }
    for (size_t i = 0; i < GLOBAL_OPTS; i++) {
        const GlobalOpt *g = &global_opts[i];
        g_autofree char *what = g_strdup_printf("--%s", g->name);

        if (g->conv.name && (raw->str[i] || raw->given[i]) &&
            !convert_value(&g->conv, what, raw->str[i], o, errp)) {
            return false;
        }
    }
    if (completion) {
        if (!cli_parse_choice("--completion", completion,
                              vuf_completion_names, VUF_COMPLETION_NAMES,
                              &mode, errp)) {
            return false;
        }
        o->completion = mode;
    }
    return true;
}

/* A comma-separated list of feature names into the bits of *mask. */
static bool parse_feature_list(const char *what, const char *list,
                               VufDeviceType dev, bool protocol,
                               uint64_t *mask, Error **errp)
{
    g_auto(GStrv) names = NULL;

    if (!list) {
        return true;
    }
    names = g_strsplit(list, ",", -1);
    for (char **n = names; *n; n++) {
        int bit = protocol ? vuf_protocol_feature_by_name(*n)
                           : vuf_device_feature_by_name(dev, *n);

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

static const char *device_name(CmdDevice dev)
{
    return dev == CMD_DEV_SCSI ? "scsi" : "blk";
}

/*
 * The device: --device if given, else virtio-scsi if a scsi-* command is
 * on the line, else virtio-blk; a command for the other device is an
 * error.
 */
static bool convert_device(const char *device, ClientOpts *o, Error **errp)
{
    CmdDevice want = CMD_DEV_ANY;
    int type;

    if (device) {
        if (!cli_parse_choice("--device", device, vuf_device_names,
                              VUF_DEVICE_NAMES, &type, errp)) {
            return false;
        }
        want = type == VUF_DEVICE_SCSI ? CMD_DEV_SCSI : CMD_DEV_BLK;
    }
    for (guint i = 0; i < o->commands->len; i++) {
        const Command *cmd = o->commands->pdata[i];

        if (want != CMD_DEV_ANY && cmd->device != CMD_DEV_ANY &&
            cmd->device != want) {
            error_setg(errp, "%s is a virtio-%s command, but the device is "
                       "virtio-%s (%s)", cmd->name, device_name(cmd->device),
                       device_name(want),
                       device ? "--device" : "an earlier command");
            return false;
        }
        if (want == CMD_DEV_ANY) {
            want = cmd->device;
        }
    }
    o->device = want == CMD_DEV_SCSI ? VUF_DEVICE_SCSI : VUF_DEVICE_BLK;
    return true;
}

/* The device, then the feature lists, whose names depend on it. */
static bool convert_device_features(const RawOpts *raw, ClientOpts *o,
                                    Error **errp)
{
    return convert_device(raw_value(raw, "device"), o, errp) &&
           parse_feature_list("--disable-feature",
                              raw_value(raw, "disable-feature"), o->device,
                              false, &o->features_disabled, errp) &&
           parse_feature_list("--require-feature",
                              raw_value(raw, "require-feature"), o->device,
                              false, &o->features_required, errp) &&
           parse_feature_list("--disable-protocol-feature",
                              raw_value(raw, "disable-protocol-feature"),
                              o->device, true,
                              &o->protocol_features_disabled, errp);
}

/* ------------------------------------------------------------------------ */
/* The whole line                                                            */

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
            "test can act between two commands of one session;\ntouch PATH "
            "creates PATH, so that a test knows the commands before it\n"
            "are done.\n"
            "\nwrite --no-wait and scsi-write --no-wait leave the write in "
            "flight\n(outstanding).  resume waits until the back-end's "
            "socket drops, connects\nagain keeping the rings and the "
            "inflight region, and waits for every\noutstanding request; it "
            "fails if the new back-end runs a completed request\nagain "
            "(replay) or never completes an outstanding one (lost).\n"
            "--timeout defaults to the global --timeout.\n"
            "\nlog-start and log-stop switch dirty page logging on and off "
            "on the running\nrings as a migrating QEMU does (LOG_SHMFD is "
            "asked for when a log-*\ncommand is given; --size: a log of "
            "other than the right size).\nlog-dirty reads and clears the "
            "log and fails if a page the device must\nhave written since "
            "log-start is not marked.\n"
            "\nExit status: 0 success, 1 a command failed (I/O error, data "
            "mismatch,\nprotocol error), 2 bad command line.", kinds);
        text = g_string_free(s, FALSE);
    }
    return text;
}

/* The commands argv[1..argc) into o->commands. */
static bool parse_commands(int argc, char **argv, ClientOpts *o,
                           Error **errp)
{
    if (argc < 2) {
        error_setg(errp, "no command given (see --help)");
        return false;
    }
    for (int i = 1; i < argc; ) {
        Command *cmd = parse_one_command(argc, argv, &i, errp);

        if (!cmd) {
            return false;
        }
        g_ptr_array_add(o->commands, cmd);
    }
    return true;
}

bool parse_command_line(int argc, char **argv, ClientOpts *o, Error **errp)
{
    RawOpts raw = { 0 };
    g_autofree GOptionEntry *entries = global_entries(&raw);
    g_autoptr(GOptionContext) ctx =
        g_option_context_new("COMMAND [ARGS] [COMMAND [ARGS]...]");
    bool ok;

    g_option_context_set_summary(ctx,
        "A guest-less vhost-user-blk and vhost-user-scsi front-end: connects "
        "to a\nback-end's socket, negotiates like QEMU, and runs the commands "
        "below through\nshared-memory virtqueues.");
    g_option_context_set_description(ctx, help_description());
    g_option_context_add_main_entries(ctx, entries, NULL);
    g_option_context_set_strict_posix(ctx, TRUE);
    ok = g_option_context_parse(ctx, &argc, &argv, errp) &&
         convert_global_opts(&raw, o, errp) &&
         parse_commands(argc, argv, o, errp) &&
         convert_device_features(&raw, o, errp);
    raw_opts_free(&raw);
    return ok;
}
