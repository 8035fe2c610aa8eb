/*
 * spindle-vu-client: the command line (vu-client-args.c).  Main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_ARGS_H
#define SPINDLE_TOOLS_VU_CLIENT_ARGS_H

#include <stdbool.h>

#include "vu-client-cmd.h"

/* Parse the whole command line into *o (o->commands must exist).  False
 * with errp set on any mistake (exit status 2). */
bool parse_command_line(int argc, char **argv, ClientOpts *o, Error **errp);

#endif
