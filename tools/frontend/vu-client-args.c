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
    CmdOption options[8];
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

static bool convert_io_args(Command *cmd, char **pos, GHashTable *vals,
                            Error **errp)
{
    g_autofree char *w_off = g_strdup_printf("%s OFFSET", cmd->name);
    g_autofree char *w_len = g_strdup_printf("%s LEN", cmd->name);

    if (!parse_size(w_off, pos[0], &cmd->offset, errp) ||
        !parse_size(w_len, pos[1], &cmd->len, errp)) {
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
    switch (cmd->kind) {
    case CMD_WRITE:
        cmd->seed = 1;
        return convert_io_args(cmd, pos, vals, errp) &&
               convert_seed(cmd, "pattern", opt_value(vals, "pattern"), errp);
    case CMD_READ:
        cmd->expect_zeroes = g_hash_table_contains(vals, "expect-zeroes");
        cmd->output = g_strdup(opt_value(vals, "output"));
        if (cmd->expect_zeroes && opt_value(vals, "verify")) {
            error_setg(errp, "read: --verify and --expect-zeroes exclude "
                       "each other");
            return false;
        }
        return convert_io_args(cmd, pos, vals, errp) &&
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
        cmd->what = g_strdup(pos[0]);
        if (!malformed_kind_valid(cmd->what)) {
            g_autofree char *kinds = malformed_kinds();

            error_setg(errp, "malformed: unknown kind '%s'; expected one "
                       "of: %s", cmd->what, kinds);
            return false;
        }
        return true;
    case CMD_BAD_REQUEST:
        cmd->what = g_strdup(pos[0]);
        if (!bad_request_kind_valid(cmd->what)) {
            g_autofree char *kinds = bad_request_kinds();

            error_setg(errp, "bad-request: unknown kind '%s'; expected one "
                       "of: %s", cmd->what, kinds);
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
                               bool protocol, uint64_t *mask, Error **errp)
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
            bit = vuf_feature_by_name(*n);
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
                         &o->connect_timeout_s, errp) &&
           parse_feature_list("--disable-feature", raw->disable_features,
                              false, &o->features_disabled, errp) &&
           parse_feature_list("--require-feature", raw->require_features,
                              false, &o->features_required, errp) &&
           parse_feature_list("--disable-protocol-feature",
                              raw->disable_protocol_features, true,
                              &o->protocol_features_disabled, errp);
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
        "A guest-less vhost-user-blk front-end: connects to a back-end's "
        "socket,\nnegotiates like QEMU, and runs the commands below through "
        "shared-memory\nvirtqueues.");
    g_option_context_set_description(ctx, help_description());
    g_option_context_add_main_entries(ctx, entries, NULL);
    g_option_context_set_strict_posix(ctx, TRUE);
    ok = g_option_context_parse(ctx, &argc, &argv, errp);
    if (ok) {
        ok = convert_global_opts(&raw, o, errp);
    }
    raw_opts_free(&raw);
    if (!ok) {
        return false;
    }
    if (argc < 2) {
        error_setg(errp, "no command given (see --help)");
        return false;
    }
    for (i = 1; i < argc; ) {
        Command *cmd = parse_one_command(argc, argv, &i, errp);

        if (!cmd) {
            return false;
        }
        g_ptr_array_add(o->commands, cmd);
    }
    return true;
}

