"""One export's queues spread over several IOThreads.

`iothread.0=a,iothread.1=b` with num-queues=4: queue i runs in IOThread
i % 2, submitting to the shared node through a block-layer queue of its
own.  spindle-vu-client's verify-run checks the data on every queue,
/proc/PID/task shows that both IOThreads did the work, and the statistics
spindle prints at exit show each queue's requests in its IOThread.  With
cache.direct=on (the node needs aligned I/O), the aligned writes took the
node's read-modify-write lock not once.
"""
import os
import re
from pathlib import Path

import pytest

from conftest import make_image
from test_frontend import run_client

NUM_QUEUES = 4


def thread_cpu_ticks(pid):
    """{thread name: ns on the CPU} of every thread of pid (schedstat: finer
    than the 10 ms ticks of stat's utime/stime)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        out[name] = out.get(name, 0) + ns
    return out


QUEUE_STATS = re.compile(
    r"export e0 queue (\d+) stats: iothread=(\S+) requests=(\d+)")
WRITE_STATS = re.compile(
    r"export e0 stats: locked_writes=(\d+) rmw_writes=(\d+)")


def o_direct_works(directory):
    """Whether files in directory can be opened with O_DIRECT (not tmpfs)."""
    probe = Path(directory) / "odirect-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


@pytest.mark.parametrize("form,cache", [("keyval", ""), ("json", ""),
                                        ("keyval", ",cache.direct=on")])
def test_queues_over_two_iothreads(client, spindle_daemon, workdir, form,
                                   cache):
    if cache and not o_direct_works(workdir):
        pytest.skip(f"{workdir} does not support O_DIRECT (tmpfs?)")
    image = make_image(workdir / "disk.img", 16 << 20)
    socket = workdir / "vu.sock"
    if form == "keyval":
        export = ["--export",
                  "type=vhost-user-blk,id=e0,node-name=d0,addr.type=unix,"
                  f"addr.path={socket},writable=on,num-queues={NUM_QUEUES},"
                  "iothread.0=iota,iothread.1=iotb"]
    else:
        export = ["--export",
                  '{"type": "vhost-user-blk", "id": "e0", "node-name": "d0",'
                  ' "addr": {"type": "unix", "path": "%s"}, "writable": true,'
                  ' "num-queues": %d, "iothread": ["iota", "iotb"]}'
                  % (socket, NUM_QUEUES)]
    d = spindle_daemon(["--blockdev",
                        f"driver=file,node-name=d0,filename={image}{cache}",
                        *export], iothreads=["iota", "iotb"], ready=[socket])
    before = thread_cpu_ticks(d.pid)
    res = run_client(client, socket, "verify-run",
                     "--size", "8M", "--count", "3000",
                     "--queues", NUM_QUEUES, "--iodepth", "16")
    run = res.result("verify-run")
    assert run["queues"] == NUM_QUEUES
    assert run["writes"] == 3000 * NUM_QUEUES
    assert all(q["writes"] == 3000 for q in run["per_queue"])
    after = thread_cpu_ticks(d.pid)
    iot = {n: after.get(n, 0) - before.get(n, 0)
           for n in after if "iota" in n or "iotb" in n}
    assert len(iot) == 2, after
    assert all(t > 0 for t in iot.values()), iot
    print("IOThread CPU ns:", iot)
    assert d.alive()
    assert d.stop() == 0, d.stderr()
    text = d.stderr()
    # Queue i ran in IOThread i % 2 and took at least its 3000 writes from
    # its ring (and the reads that verified them).
    queues = {int(m[1]): (m[2], int(m[3])) for m in QUEUE_STATS.finditer(text)}
    assert sorted(queues) == list(range(NUM_QUEUES)), text
    for i, (iothread, requests) in queues.items():
        assert iothread == ("iota", "iotb")[i % 2], text
        assert requests > 3000, text
    writes = WRITE_STATS.search(text)
    assert writes, text
    assert (int(writes[1]), int(writes[2])) == (0, 0), text
