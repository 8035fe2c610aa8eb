/*
 * Fuzz harness: the command line's --blockdev, --export and --object.
 *
 * Each input is a sequence of options, one per line, as the daemon
 * takes them in order (daemon/main.c): the line's first byte says which
 * ('b' --blockdev, 'e' --export, 'o' --object; any other line is
 * skipped) and the rest is its argument, key=value or JSON.
 *
 *   --blockdev  blockdev_add_str(): the node is opened and kept (null-co,
 *               raw, blkdebug; see below for file);
 *   --object    object_option_help(), then object_create_from_option():
 *               a valid iothread or throttle-group is created (an
 *               IOThread's thread starts) and lives until the end of the
 *               input, as on the command line;
 *   --export    export_opts_parse(), then export_create() over the nodes
 *               and IOThreads so far: everything is read and checked
 *               (common options, the type's, nodes, LUNs, IOThreads);
 *               the export never starts, because an input naming a
 *               socket path is skipped and the harness has no listening
 *               socket for addr.type=fd to name.
 *
 * Inputs that could name a host file are skipped (helpers.h), and so
 * are those holding "path": nothing an input does reaches the file
 * system.  At the end of the input every export, node, IOThread and
 * throttle group it created is deleted.
 */
#include <string.h>
#include <glib.h>

#include "export/blockdev.h"
#include "export/export.h"
#include "helpers.h"
#include "util/iothread.h"
#include "util/object.h"
#include "util/opts.h"
#include "util/throttle-group.h"

static void option_blockdev(AioContext *ctx, const char *arg)
{
    Error *err = NULL;

    blockdev_add_str(arg, ctx, &err);
    error_free(err);
}

static void option_object(const char *arg)
{
    Error *err = NULL;
    char *help = object_option_help(arg);

    if (help) {
        g_free(help);
        return;
    }
    object_create_from_option(arg, &err);
    error_free(err);
}

static void option_export(AioContext *ctx, const char *arg)
{
    Error *err = NULL;
    Opts *opts = export_opts_parse(arg, &err);

    if (opts) {
        Export *exp = export_create(opts, ctx, &err);

        /* An export cannot start here (see above). */
        g_assert(!exp);
        opts_free(opts);
    }
    error_free(err);
}

static void destroy_iothreads(void)
{
    GPtrArray *list = iothread_list();

    for (guint i = 0; i < list->len; i++) {
        iothread_destroy(g_ptr_array_index(list, i));
    }
    g_ptr_array_unref(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    AioContext *ctx = fuzz_main_context();
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;

    if (fuzz_may_name_host_file(data, size) ||
        memmem(data, size, "path", 4) ||
        !(text = fuzz_input_string(data, size))) {
        return -1;                  /* not kept in the corpus */
    }
    lines = g_strsplit(text, "\n", -1);
    for (char **l = lines; *l; l++) {
        switch (**l) {
        case 'b':
            option_blockdev(ctx, *l + 1);
            break;
        case 'e':
            option_export(ctx, *l + 1);
            break;
        case 'o':
            option_object(*l + 1);
            break;
        }
    }
    export_delete_all();
    blockdev_del_all();
    destroy_iothreads();
    throttle_group_destroy_all();
    fuzz_poll(ctx);
    return 0;
}
