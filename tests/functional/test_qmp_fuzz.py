"""Random QMP commands against a live daemon: it answers every one and stays up.

Every command the daemon lists (but quit) is run thousands of times with
arguments drawn at random from names and values that matter to some command
(ids that exist, ids that do not, extreme integers, wrong types, nested
objects, long strings).  Most calls are errors; some succeed and change the
daemon (nodes resized, IOThreads added, exports added and deleted).  After each
reply the test checks the reply's shape; at the end the daemon must still
answer, its original export must still serve data written before the run, and
quit must end it with status 0.  The seed is fixed per case so a failure
replays; SPINDLE_QMP_FUZZ_SEED and SPINDLE_QMP_FUZZ_COUNT override it.
"""

import json
import os
import random
import socket
import subprocess

import pytest

from qmp_util import SpindleQmp

COUNT = int(os.environ.get("SPINDLE_QMP_FUZZ_COUNT", "4000"))
SEEDS = ([int(os.environ["SPINDLE_QMP_FUZZ_SEED"])]
         if "SPINDLE_QMP_FUZZ_SEED" in os.environ else [1, 2, 3])

KEYS = ["id", "node-name", "size", "driver", "path", "property", "value",
        "qom-type", "type", "addr", "lun", "writable", "iothread", "mode",
        "num-queues", "filename", "file", "flat", "query-nodes", "device",
        "poll-max-ns", "poll-grow", "logical-block-size", "serial", "luns",
        "read-only", "cache", "fixed-iothread", "enable", "wwn", "vendor"]


def values(workdir):
    return [None, True, False, 0, -1, 1, 2**63 - 1, -2**63, 512, 1 << 30,
            "", "x", "n0", "n1", "e0", "s0", "iot0", "iot9", "/objects/iot0",
            "poll-max-ns", "cpu-affinity", "vhost-user-blk",
            "vhost-user-scsi", "iothread", "file", "null-co", "hard", "safe",
            [], [1], ["iot0"], [{"node-name": "n1"}], {},
            {"type": "unix", "path": str(workdir / "fz.sock")},
            {"type": "fd", "str": "0"},
            {"driver": "null-co"}, {"direct": True}, 1.5, "a" * 5000,
            "\u00e9\u0000"]


class RawQmp:
    """A second client on the monitor, sending exact bytes."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(str(path))
        self.rfile = self.sock.makefile("rb")
        assert "QMP" in self.read()
        assert self.cmd("qmp_capabilities") == {"return": {}}

    def read(self):
        while True:
            msg = json.loads(self.rfile.readline())
            if "event" not in msg:
                return msg

    def cmd(self, name, args=None):
        req = {"execute": name}
        if args is not None:
            req["arguments"] = args
        self.sock.sendall(json.dumps(req).encode())
        return self.read()

    def close(self):
        self.rfile.close()
        self.sock.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_commands_never_break_the_daemon(binary, tmp_path, seed):
    spindle = binary("spindle")
    client = binary("spindle-vu-client")
    img = tmp_path / "a.img"
    img.write_bytes(b"")
    os.truncate(img, 16 << 20)
    (tmp_path / "b.img").write_bytes(b"\0" * (1 << 20))
    sock = tmp_path / "e0.sock"
    args = ["--object", "iothread,id=iot0",
            "--blockdev", f"driver=file,node-name=n0,filename={img}",
            "--blockdev", f"driver=file,node-name=n1,filename={tmp_path}/b.img",
            "--export", "type=vhost-user-blk,id=e0,node-name=n0,"
                        f"addr.type=unix,addr.path={sock},writable=on,"
                        "iothread=iot0"]
    with SpindleQmp(spindle, tmp_path, args) as d:
        before = subprocess.run([str(client), "-s", str(sock), "write", "0",
                                 "64k", "--pattern", "7"],
                                capture_output=True, text=True, timeout=60)
        assert before.returncode == 0, before.stderr
        raw = RawQmp(d.monitor)
        names = [c["name"] for c in raw.cmd("query-commands")["return"]]
        # quit ends the run; deleting e0 would end the data check below.
        names = [n for n in names if n not in ("quit", "qmp_capabilities")]
        rnd = random.Random(seed)
        vals = values(tmp_path)
        outcomes = {"return": 0, "error": 0}
        for _ in range(COUNT):
            name = rnd.choice(names)
            cmd_args = {rnd.choice(KEYS): rnd.choice(vals)
                        for _ in range(rnd.randint(0, 5))}
            if name == "block-export-del" and cmd_args.get("id") == "e0":
                continue
            reply = raw.cmd(name, cmd_args)
            assert d.proc.poll() is None, \
                f"spindle died at {name} {cmd_args}:\n{d.stderr()}"
            assert set(reply) in ({"return"}, {"error"}), reply
            if "error" in reply:
                assert set(reply["error"]) == {"class", "desc"}, reply
                assert reply["error"]["desc"], reply
            outcomes[next(iter(reply))] += 1
        print(f"seed {seed}: {outcomes}")
        # Both kinds happened: the run exercised more than argument checks.
        assert outcomes["return"] > 0 and outcomes["error"] > 0
        assert any(e["id"] == "e0"
                   for e in raw.cmd("query-block-exports")["return"])
        after = subprocess.run([str(client), "-s", str(sock), "read", "0",
                                "64k", "--verify", "7"],
                               capture_output=True, text=True, timeout=60)
        assert after.returncode == 0, after.stderr + d.stderr()
        assert raw.cmd("quit") == {"return": {}}
        raw.close()
        assert d.proc.wait(20) == 0, d.stderr()
