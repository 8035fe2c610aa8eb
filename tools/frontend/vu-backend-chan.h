/*
 * vu-backend-chan: the back-end channel of a vu-frontend
 * (vu-backend-chan.c).
 */
#ifndef SPINDLE_TOOLS_VU_BACKEND_CHAN_H
#define SPINDLE_TOOLS_VU_BACKEND_CHAN_H

#include "vu-types.h"

/* ------------------------------------------------------------------------ */
/* The back-end channel (control thread)                                     */

/*
 * With the SLAVE_REQ protocol feature the front-end gives the back-end one
 * end of a socket pair (SET_SLAVE_REQ_FD) on which the back-end sends its
 * own requests.  This front-end understands CONFIG_CHANGE_MSG (the device
 * config changed: a resized disk) and counts it; it acknowledges any
 * request that asks for a reply (status 0 for CONFIG_CHANGE_MSG, 1 for
 * others, which are otherwise ignored).  Messages are read only inside the
 * calls below, so they wait in the socket meanwhile.
 */

/* Our end of the channel, or -1 (not negotiated, not connected). */
int vuf_backend_channel_fd(const VuFrontend *fe);

/*
 * Handle the messages on the channel, waiting up to timeout_ms for the
 * first (0: only what is there).  False with errp set if there is no
 * channel, the back-end closed it or sent a malformed message.
 */
bool vuf_poll_backend_channel(VuFrontend *fe, int timeout_ms, Error **errp);

/* CONFIG_CHANGE_MSGs received in this session so far. */
uint64_t vuf_config_changes(const VuFrontend *fe);

/*
 * Wait up to timeout_ms (< 0: forever) for a CONFIG_CHANGE_MSG not yet
 * returned by an earlier call (one that already arrived counts at once).
 * False with errp set on a time-out or as vuf_poll_backend_channel().
 */
bool vuf_wait_config_change(VuFrontend *fe, int timeout_ms, Error **errp);

#endif
