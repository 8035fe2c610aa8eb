/*
 * virtio-scsi wire format: feature bits, the configuration space, the
 * command request and response, the control queue's task management and
 * asynchronous notification messages, and events.
 *
 * Specification: virtio 1.x (OASIS, "Virtual I/O Device (VIRTIO)"),
 * section 5.6 "SCSI Host Device".  Every field is little-endian.
 *
 * Shared by the back-end (hw/virtio/virtio-scsi.c) and the guest-less
 * front-end (tools/frontend/), so both sides agree on one layout.  Plain
 * data definitions only.
 */
#ifndef SPINDLE_HW_VIRTIO_VIRTIO_SCSI_WIRE_H
#define SPINDLE_HW_VIRTIO_VIRTIO_SCSI_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <glib.h>

/* Feature bits (5.6.3). */
#define VIRTIO_SCSI_F_INOUT         0   /* bidirectional requests */
#define VIRTIO_SCSI_F_HOTPLUG       1   /* transport reset events for
                                         * LUNs added or removed */
#define VIRTIO_SCSI_F_CHANGE        2   /* parameter change events */
#define VIRTIO_SCSI_F_T10_PI        3   /* protection information */

/* Queues: 0 control, 1 event, 2.. requests (5.6.2). */
#define VIRTIO_SCSI_VQ_CONTROL      0
#define VIRTIO_SCSI_VQ_EVENT        1
#define VIRTIO_SCSI_VQ_REQUEST0     2

/* Default sizes the driver may change through the config space. */
#define VIRTIO_SCSI_CDB_DEFAULT_SIZE    32
#define VIRTIO_SCSI_SENSE_DEFAULT_SIZE  96

/* The configuration space (5.6.4). */
/* The driver may write only sense_size and cdb_size (5.6.4). */
typedef struct __attribute__((packed)) VirtioScsiConfig {
    uint32_t num_queues;         /* request queues */
    uint32_t seg_max;            /* data segments per request */
    uint32_t max_sectors;        /* largest transfer, in 512-byte sectors */
    uint32_t cmd_per_lun;        /* commands in flight per LUN */
    uint32_t event_info_size;    /* bytes of an event buffer the device
                                  * fills at most */
    uint32_t sense_size;         /* bytes of sense (driver writable) */
    uint32_t cdb_size;           /* bytes of CDB (driver writable) */
    uint16_t max_channel;
    uint16_t max_target;
    uint32_t max_lun;
} VirtioScsiConfig;

G_STATIC_ASSERT(sizeof(VirtioScsiConfig) == 36);
G_STATIC_ASSERT(offsetof(VirtioScsiConfig, sense_size) == 20);
G_STATIC_ASSERT(offsetof(VirtioScsiConfig, cdb_size) == 24);

/*
 * LUN addressing as Linux's driver uses it (5.6.6.1): lun[0] = 1,
 * lun[1] = target, lun[2..3] = the LUN in SAM's single-level format
 * (0x40 | lun >> 8, lun & 0xff; LUNs below 256 may also come without the
 * 0x40 flag), lun[4..7] = 0.
 */
#define VIRTIO_SCSI_LUN_BYTES       8

/* The device-readable head of a command request (5.6.6.1), without the
 * CDB, whose size is cdb_size.  Data-out follows the CDB. */
typedef struct __attribute__((packed)) VirtioScsiCmdReqHdr {
    uint8_t lun[VIRTIO_SCSI_LUN_BYTES];
    uint64_t tag;                /* "id": the task's tag, for TMFs */
    uint8_t task_attr;           /* VIRTIO_SCSI_S_SIMPLE ... */
    uint8_t prio;
    uint8_t crn;
} VirtioScsiCmdReqHdr;

G_STATIC_ASSERT(sizeof(VirtioScsiCmdReqHdr) == 19);

/* The device-writable head of a command response, without the sense
 * bytes (sense_size of them follow).  Data-in follows the sense. */
typedef struct __attribute__((packed)) VirtioScsiCmdRespHdr {
    uint32_t sense_len;          /* bytes of sense written */
    uint32_t resid;              /* residual: bytes not transferred */
    uint16_t status_qualifier;
    uint8_t status;              /* SAM status (GOOD, CHECK CONDITION...) */
    uint8_t response;            /* VIRTIO_SCSI_S_* */
} VirtioScsiCmdRespHdr;

G_STATIC_ASSERT(sizeof(VirtioScsiCmdRespHdr) == 12);

/* Task attributes. */
#define VIRTIO_SCSI_S_SIMPLE        0
#define VIRTIO_SCSI_S_ORDERED       1
#define VIRTIO_SCSI_S_HEAD          2
#define VIRTIO_SCSI_S_ACA           3

/* Response values (commands and task management). */
#define VIRTIO_SCSI_S_OK                    0
#define VIRTIO_SCSI_S_OVERRUN               1
#define VIRTIO_SCSI_S_ABORTED               2
#define VIRTIO_SCSI_S_BAD_TARGET            3
#define VIRTIO_SCSI_S_RESET                 4
#define VIRTIO_SCSI_S_BUSY                  5
#define VIRTIO_SCSI_S_TRANSPORT_FAILURE     6
#define VIRTIO_SCSI_S_TARGET_FAILURE        7
#define VIRTIO_SCSI_S_NEXUS_FAILURE         8
#define VIRTIO_SCSI_S_FAILURE               9
#define VIRTIO_SCSI_S_FUNCTION_SUCCEEDED    10
#define VIRTIO_SCSI_S_FUNCTION_REJECTED     11
#define VIRTIO_SCSI_S_INCORRECT_LUN         12
/* A TMF that completed is answered VIRTIO_SCSI_S_OK ("function complete"). */
#define VIRTIO_SCSI_S_FUNCTION_COMPLETE     0

/* Control queue request types (5.6.6.2). */
#define VIRTIO_SCSI_T_TMF                   0
#define VIRTIO_SCSI_T_AN_QUERY              1
#define VIRTIO_SCSI_T_AN_SUBSCRIBE          2

/* Task management subtypes. */
#define VIRTIO_SCSI_T_TMF_ABORT_TASK            0
#define VIRTIO_SCSI_T_TMF_ABORT_TASK_SET        1
#define VIRTIO_SCSI_T_TMF_CLEAR_ACA             2
#define VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET        3
#define VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET       4
#define VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET    5
#define VIRTIO_SCSI_T_TMF_QUERY_TASK            6
#define VIRTIO_SCSI_T_TMF_QUERY_TASK_SET        7

/* Task management request (device-readable) and response (writable). */
typedef struct __attribute__((packed)) VirtioScsiCtrlTmfReq {
    uint32_t type;               /* VIRTIO_SCSI_T_TMF */
    uint32_t subtype;
    uint8_t lun[VIRTIO_SCSI_LUN_BYTES];
    uint64_t tag;                /* the task, for ABORT/QUERY TASK */
} VirtioScsiCtrlTmfReq;

typedef struct __attribute__((packed)) VirtioScsiCtrlTmfResp {
    uint8_t response;
} VirtioScsiCtrlTmfResp;

G_STATIC_ASSERT(sizeof(VirtioScsiCtrlTmfReq) == 24);

/* Asynchronous notification query / subscribe. */
typedef struct __attribute__((packed)) VirtioScsiCtrlAnReq {
    uint32_t type;               /* VIRTIO_SCSI_T_AN_QUERY / _SUBSCRIBE */
    uint8_t lun[VIRTIO_SCSI_LUN_BYTES];
    uint32_t event_requested;
} VirtioScsiCtrlAnReq;

typedef struct __attribute__((packed)) VirtioScsiCtrlAnResp {
    uint32_t event_actual;
    uint8_t response;
} VirtioScsiCtrlAnResp;

G_STATIC_ASSERT(sizeof(VirtioScsiCtrlAnReq) == 16);
G_STATIC_ASSERT(sizeof(VirtioScsiCtrlAnResp) == 5);

/* Events (5.6.6.3), put by the device in buffers of the event queue. */
#define VIRTIO_SCSI_T_NO_EVENT              0
#define VIRTIO_SCSI_T_TRANSPORT_RESET       1
#define VIRTIO_SCSI_T_ASYNC_NOTIFY          2
#define VIRTIO_SCSI_T_PARAM_CHANGE          3
#define VIRTIO_SCSI_T_EVENTS_MISSED         0x80000000u

/* Reasons of a transport reset event. */
#define VIRTIO_SCSI_EVT_RESET_HARD          0
#define VIRTIO_SCSI_EVT_RESET_RESCAN        1   /* a LUN appeared */
#define VIRTIO_SCSI_EVT_RESET_REMOVED       2   /* a LUN went away */

typedef struct __attribute__((packed)) VirtioScsiEvent {
    uint32_t event;
    uint8_t lun[VIRTIO_SCSI_LUN_BYTES];
    uint32_t reason;             /* PARAM_CHANGE: ASC | ASCQ << 8 */
} VirtioScsiEvent;

G_STATIC_ASSERT(sizeof(VirtioScsiEvent) == 16);

#endif
