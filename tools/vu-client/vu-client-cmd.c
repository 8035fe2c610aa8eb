/*
 * spindle-vu-client: a command's defaults and its end, and the tables of
 * named kinds.  Every option of every command starts from the values
 * command_new() sets, so that the parser (vu-client-args.c) only writes
 * what the command line says.
 */

#include <string.h>

#include <glib.h>

#include "vu-client-cmd.h"

Command *command_new(CmdKind kind, const char *name, CmdDevice device,
                     CmdRun run)
{
    Command *cmd = g_new(Command, 1);

    *cmd = (Command) {
        .kind = kind, .name = name, .device = device, .run = run,
        .seed = 1,                  /* write --pattern, verify-run --seed */
        .bs = 4096, .iodepth = 8,   /* verify-run */
        .evpd_page = -1,            /* standard INQUIRY data */
        .cdb_bits = 16,
        .expect_sense = -1,         /* GOOD expected */
        .events = UINT32_MAX,       /* scsi-an-query: every class */
        .wait_s = -1,               /* the global --timeout */
    };
    return cmd;
}

static const char *kind_name(const void *table, size_t size, size_t i)
{
    const char *name;

    memcpy(&name, (const char *)table + i * size, sizeof(name));
    return name;
}

const void *kind_find(const void *table, size_t n, size_t size,
                      const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(kind_name(table, size, i), name)) {
            return (const char *)table + i * size;
        }
    }
    return NULL;
}

void kind_names(GString *s, const void *table, size_t n, size_t size,
                unsigned wrap, unsigned *count)
{
    for (size_t i = 0; i < n; i++, (*count)++) {
        g_string_append_printf(s, "%s%s", *count == 0 ? ""
                               : wrap && *count % wrap == 0 ? ",\n  "
                               : ", ", kind_name(table, size, i));
    }
}

void command_free(gpointer p)
{
    Command *cmd = p;

    g_free(cmd->output);
    g_free(cmd->what);
    g_free(cmd);
}
