/*
 * spindle-vu-client: verify-run and malformed (vu-client-run.c).  CmdRun
 * handlers (vu-client-cmd.h) and what the parser needs to check
 * malformed's KIND; main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_RUN_H
#define SPINDLE_TOOLS_VU_CLIENT_RUN_H

#include <stdbool.h>

#include "vu-client-cmd.h"

CmdHandler cmd_verify_run, cmd_malformed;
/* Is name a kind `malformed` knows (a message or a ring fault)? */
bool malformed_kind_valid(const char *name);
/* The names `malformed` accepts, for --help ("a, b, c"). Caller frees. */
char *malformed_kinds(void);

#endif
