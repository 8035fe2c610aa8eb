/*
 * vu-types: the handles and enums every part of the vu-frontend library
 * names (a front-end, one of its queues, the device type and completion
 * mode), and the wire formats they carry.  See vu-frontend.h for the
 * whole library.
 */
#ifndef SPINDLE_TOOLS_VU_TYPES_H
#define SPINDLE_TOOLS_VU_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/virtio/vhost-user-wire.h"
#include "hw/virtio/virtio-blk-wire.h"
#include "hw/virtio/virtio-ring-wire.h"
#include "hw/virtio/virtio-scsi-wire.h"
#include "util/error.h"

typedef struct VuFrontend VuFrontend;
typedef struct VufQueue VufQueue;


typedef enum VufCompletion {
    VUF_COMPLETION_POLL,        /* spin on used->idx; ask for no interrupts */
    VUF_COMPLETION_INTERRUPT,   /* block on the call eventfd */
} VufCompletion;

typedef enum VufDeviceType {
    VUF_DEVICE_BLK,             /* read and check the virtio-blk config */
    VUF_DEVICE_GENERIC,         /* no device-specific config handling */
    VUF_DEVICE_SCSI,            /* read and check the virtio-scsi config;
                                 * queue 0 is the control queue, 1 the
                                 * event queue, 2.. the request queues */
} VufDeviceType;

/*
 * The names the command lines of spindle-bench and spindle-vu-client give
 * the completion modes and the device types, indexed by their enums (for
 * cli_parse_choice() and the reports).  A device type no command line
 * offers (VUF_DEVICE_GENERIC) has a NULL name.
 */
#define VUF_COMPLETION_NAMES    (VUF_COMPLETION_INTERRUPT + 1)
#define VUF_DEVICE_NAMES        (VUF_DEVICE_SCSI + 1)
extern const char *const vuf_completion_names[VUF_COMPLETION_NAMES];
extern const char *const vuf_device_names[VUF_DEVICE_NAMES];

typedef enum VufMemMethod {
    VUF_MEM_SET_MEM_TABLE,      /* the default */
    VUF_MEM_ADD_MEM_REG,        /* needs CONFIGURE_MEM_SLOTS; error if absent */
} VufMemMethod;

#endif
