"""A small blocking QMP client over a UNIX socket.

poll-frontier talks to one daemon from two threads (the runs, and a
sampler during the load step); each thread has its own connection, which
QMP allows.  Spindle writes one JSON message per line; events (a line with
"event") are kept in .events and otherwise ignored.

    qmp = Qmp("/tmp/x/qmp.sock")
    qmp.cmd("qom-set", {"path": "/objects/iot-0", "property": "poll-max-ns",
                        "value": 8000})
    threads = qmp.cmd("query-iothreads")
"""

import json
import socket
import time

CONNECT_TIMEOUT_S = 10.0
REPLY_TIMEOUT_S = 10.0


class QmpError(RuntimeError):
    """An error reply (class and desc), or a broken connection."""

    def __init__(self, message, error_class=None):
        super().__init__(message)
        self.error_class = error_class


class Qmp:
    def __init__(self, path, timeout=CONNECT_TIMEOUT_S, alive=None):
        """Connect (retrying until `timeout` while alive() holds), read the
        greeting and negotiate capabilities."""
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                break
            except OSError as e:
                sock.close()
                if time.monotonic() > deadline or (alive and not alive()):
                    raise QmpError(f"cannot connect to the QMP monitor {path}: {e}")
                time.sleep(0.02)
        sock.settimeout(REPLY_TIMEOUT_S)
        self.path = str(path)
        self.sock = sock
        self.file = sock.makefile("rwb")
        self.events = []
        greeting = self._read()
        if "QMP" not in greeting:
            raise QmpError(f"{path}: not a QMP greeting: {greeting!r}")
        self.cmd("qmp_capabilities")

    def _read(self):
        try:
            line = self.file.readline()
        except OSError as e:
            raise QmpError(f"QMP connection {self.path}: {e}")
        if not line:
            raise QmpError(f"QMP connection {self.path} closed by the daemon")
        return json.loads(line)

    def cmd(self, name, args=None):
        """Run a command and return its "return" value; QmpError if it failed."""
        msg = {"execute": name}
        if args is not None:
            msg["arguments"] = args
        try:
            self.file.write(json.dumps(msg).encode() + b"\n")
            self.file.flush()
        except OSError as e:
            raise QmpError(f"QMP connection {self.path}: {e}")
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                err = reply["error"]
                raise QmpError(f"{name}: {err.get('class')}: {err.get('desc')}",
                               err.get("class"))
            return reply.get("return")

    def close(self):
        for obj in (self.file, self.sock):
            try:
                obj.close()
            except OSError:
                pass
