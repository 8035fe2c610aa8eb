/*
 * Every trace point of Spindle, in one list.
 *
 * Each line is SPINDLE_PROBE(name, nargs, binaries, arguments): the probe's
 * name (USDT provider "spindle"), how many arguments it passes, the
 * programs that carry it (the daemon "spindle"; the guest-side library's
 * probes are in "spindle-bench" and "spindle-vu-client"), and what the
 * arguments are, in order.  util/trace.h refuses to compile a
 * SPINDLE_TRACEn() whose probe is not listed here or whose argument count
 * differs, and tests/functional/test_trace_probes.py checks that each built
 * program carries exactly the probes listed for it (readelf -n), so this
 * list is the reference for whoever attaches bpftrace, perf or systemtap.
 *
 * Keep the groups in layer order and the names in each group sorted.
 */

/* util/: the event loop */
SPINDLE_PROBE(aio_notify,             1, "spindle", "ctx")
SPINDLE_PROBE(poll_grow,              3, "spindle", "ctx, old_ns, new_ns")
SPINDLE_PROBE(poll_shrink,            3, "spindle", "ctx, old_ns, new_ns")
SPINDLE_PROBE(poll_started,           2, "spindle", "ctx, started (1) or ended (0)")

/* block/: the file driver and the I/O engines */
SPINDLE_PROBE(blkdebug_inject_error,  3, "spindle", "node, request, errno")
SPINDLE_PROBE(file_discard,           3, "spindle", "fd, offset, bytes")
SPINDLE_PROBE(file_open,              2, "spindle", "fd, engine name")
SPINDLE_PROBE(file_write_zeroes,      3, "spindle", "fd, offset, bytes")
SPINDLE_PROBE(laio_complete,          2, "spindle", "request, result")
SPINDLE_PROBE(laio_queue,             2, "spindle", "request, fd")
SPINDLE_PROBE(laio_submit,            3, "spindle", "engine, queued, io_submit() result")
SPINDLE_PROBE(threads_complete,       2, "spindle", "request, result")
SPINDLE_PROBE(threads_submit,         2, "spindle", "request, fd")
SPINDLE_PROBE(throttle_go,            2, "spindle", "node, request (leaving its FIFO for the child)")
SPINDLE_PROBE(throttle_wait,          3, "spindle", "node, is_write, ns until the buckets have room")
SPINDLE_PROBE(uring_complete,         2, "spindle", "request, result")
SPINDLE_PROBE(uring_get_events,       2, "spindle", "engine, io_uring_get_events() result")
SPINDLE_PROBE(uring_queue,            2, "spindle", "request, fd")
SPINDLE_PROBE(uring_submit,           3, "spindle", "engine, queued, io_uring_submit() result")

/* hw/scsi/: the SCSI disk */
SPINDLE_PROBE(scsi_disk_complete,     3, "spindle", "opcode, status, transfer error")
SPINDLE_PROBE(scsi_disk_rw,           3, "spindle", "opcode, lba, blocks")
SPINDLE_PROBE(scsi_disk_submit,       2, "spindle", "opcode, CDB length")

/* hw/virtio/: rings, devices, the vhost-user server */
SPINDLE_PROBE(virtio_blk_complete,    3, "spindle", "queue, request type, status")
SPINDLE_PROBE(virtio_blk_submit,      3, "spindle", "queue, request type, sector")
SPINDLE_PROBE(virtio_scsi_complete,   3, "spindle", "queue, response, status")
SPINDLE_PROBE(virtio_scsi_event,      2, "spindle", "event, reason")
SPINDLE_PROBE(virtio_scsi_event_missed, 1, "spindle", "event")
SPINDLE_PROBE(virtio_scsi_submit,     3, "spindle", "queue, lun, opcode")
SPINDLE_PROBE(virtio_scsi_tmf,        3, "spindle", "subtype, lun, tag")
SPINDLE_PROBE(virtio_scsi_tmf_done,   2, "spindle", "subtype, response")
SPINDLE_PROBE(vq_broken,              1, "spindle", "queue")
SPINDLE_PROBE(vq_kick,                1, "spindle", "queue")
SPINDLE_PROBE(vq_notify,              2, "spindle", "queue, signalled")
SPINDLE_PROBE(vq_pop,                 3, "spindle", "queue, head, last avail index")
SPINDLE_PROBE(vq_push,                3, "spindle", "queue, head, length")
SPINDLE_PROBE(vu_config_changed,      0, "spindle", "")
SPINDLE_PROBE(vu_connect,             1, "spindle", "fd")
SPINDLE_PROBE(vu_disconnect,          0, "spindle", "")
SPINDLE_PROBE(vu_queue_start,         2, "spindle", "queue, base")
SPINDLE_PROBE(vu_queue_stop,          2, "spindle", "queue, base")
SPINDLE_PROBE(vu_request,             2, "spindle", "request, payload size")

/* tools/frontend/: the guest-side driver library */
SPINDLE_PROBE(vuf_add,                2, "spindle-bench spindle-vu-client", "queue, head")
SPINDLE_PROBE(vuf_complete,           3, "spindle-bench spindle-vu-client", "queue, id, length")
SPINDLE_PROBE(vuf_interrupt,          2, "spindle-bench spindle-vu-client", "queue, completions")
SPINDLE_PROBE(vuf_kick,               2, "spindle-bench spindle-vu-client", "queue, avail index")
SPINDLE_PROBE(vuf_kick_avoided,       2, "spindle-bench spindle-vu-client", "queue, avail index")
