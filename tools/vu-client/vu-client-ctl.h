/*
 * spindle-vu-client: the commands about the session and the device
 * (vu-client-ctl.c), for either device type.  CmdRun handlers
 * (vu-client-cmd.h); main thread.
 */
#ifndef SPINDLE_TOOLS_VU_CLIENT_CTL_H
#define SPINDLE_TOOLS_VU_CLIENT_CTL_H

#include <stdbool.h>

#include "vu-client-cmd.h"

CmdHandler cmd_info, cmd_reconnect, cmd_stop, cmd_stats;
CmdHandler cmd_get_config, cmd_wait_config_change, cmd_wait_file;
CmdHandler cmd_touch;

#endif
