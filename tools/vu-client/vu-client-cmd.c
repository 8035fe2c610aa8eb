/*
 * spindle-vu-client: a command's defaults and its end.  Every option of
 * every command starts from the values command_new() sets, so that the
 * parser (vu-client-args.c) only writes what the command line says.
 */

#include <glib.h>

#include "vu-client-cmd.h"

Command *command_new(CmdKind kind, const char *name, CmdDevice device,
                     CmdRun run)
{
    Command *cmd = g_new0(Command, 1);

    cmd->kind = kind;
    cmd->name = name;
    cmd->device = device;
    cmd->run = run;
    cmd->seed = 1;
    cmd->bs = 4096;
    cmd->iodepth = 8;
    cmd->evpd_page = -1;
    cmd->cdb_bits = 16;
    cmd->expect_sense = -1;
    cmd->events = UINT32_MAX;
    cmd->wait_s = -1;
    return cmd;
}

void command_free(gpointer p)
{
    Command *cmd = p;

    g_free(cmd->output);
    g_free(cmd->what);
    g_free(cmd);
}
