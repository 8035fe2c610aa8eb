"""A private libvirtd for end-to-end tests, its virsh, and a domain's console.

libvirt's QEMU driver runs in one of two modes: privileged (libvirtd as
root: /etc/libvirt, /run/libvirt, /var/lib/libvirt, QEMU as the
libvirt-qemu user) or session (libvirtd as any other user: every file in
that user's XDG directories, QEMU as that user).  The tests use the
session mode, because it is the one whose files can all live in a
directory of the test's own: nothing on the machine is read or changed,
and a second test run does not meet the first one's state.

Run by root, the daemon is started as an unprivileged user (`nobody`, via
setpriv) so that it still runs in session mode; QEMU then runs as that user
too, which is what a production host looks like (QEMU as libvirt-qemu, not
as the owner of Spindle's socket): the caller hands the sockets QEMU must
open to that user with `give()`, as docs/user-guide.md tells a user to.
Run by anyone else, libvirtd and QEMU run as the caller and `give()` does
nothing.

Its configuration:

- qemu.conf `stdio_handler = "file"`: QEMU's output goes to a log file
  (XDG_CACHE_HOME/libvirt/qemu/log/NAME.log) instead of through virtlogd,
  a second daemon the test would have to start;
- libvirtd.conf: a log file of its own (`Libvirtd.log_tail()`).

    d = Libvirtd(Path(tempfile.mkdtemp())).start()   # LibvirtdError: cannot run
    d.virsh("create", "dom.xml", "--paused")
    console = Console(path_of_the_domains_serial_socket).connect()
    d.virsh("resume", "vm")
    console.wait_for("SPINDLE-STAGE ready", timeout=120)
    d.stop()             # destroys what runs, then SIGTERM to libvirtd's pid

Standard library only, like the rest of the harness.
"""

import os
import pwd
import select
import shutil
import signal
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

LIBVIRTD = "libvirtd"
VIRSH = "virsh"
# The QEMU driver is a loadable module of libvirtd (libvirt-daemon-driver-qemu).
QEMU_DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu/libvirt/connection-driver",
                    "/usr/lib64/libvirt/connection-driver",
                    "/usr/lib/libvirt/connection-driver")
QEMU_DRIVER = "libvirt_driver_qemu.so"
# Who runs libvirtd (and so QEMU) when the tests run as root.
UNPRIVILEGED_USER = "nobody"
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 20

_INSTALL = ("install libvirt-daemon, libvirt-daemon-driver-qemu and "
            "libvirt-clients (scripts/install-deps.sh)")


class LibvirtdError(RuntimeError):
    """libvirtd could not be started here, or virsh failed."""


def _which(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def missing_prerequisites():
    """Reasons libvirtd cannot be started here (empty: it can be tried)."""
    reasons = []
    for name in (LIBVIRTD, VIRSH):
        if _which(name) is None:
            reasons.append(f"{name} not found: {_INSTALL}")
    if not any((Path(d) / QEMU_DRIVER).exists() for d in QEMU_DRIVER_DIRS):
        reasons.append(f"libvirt's QEMU driver ({QEMU_DRIVER}) not found: "
                       "install libvirt-daemon-driver-qemu")
    if os.geteuid() == 0:
        if _which("setpriv") is None:
            reasons.append("setpriv not found (util-linux): root needs it to "
                           "start libvirtd as an unprivileged user")
        try:
            pwd.getpwnam(UNPRIVILEGED_USER)
        except KeyError:
            reasons.append(f"no user {UNPRIVILEGED_USER!r} to run libvirtd as")
    return reasons


class Libvirtd:
    """One session-mode libvirtd whose every file is under `base`."""

    def __init__(self, base):
        self.base = Path(base)
        self.proc = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam(UNPRIVILEGED_USER)
            self.uid, self.gid = pw.pw_uid, pw.pw_gid
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
        self.dirs = {key: self.base / key
                     for key in ("config", "runtime", "cache", "data", "home")}
        self.socket = self.dirs["runtime"] / "libvirt" / "libvirt-sock"
        self.log = self.base / "libvirtd.log"
        self.uri = f"qemu:///session?socket={self.socket}"

    # --- starting and stopping ---------------------------------------------

    def _env(self):
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.dirs["home"]),
            "XDG_CONFIG_HOME": str(self.dirs["config"]),
            "XDG_RUNTIME_DIR": str(self.dirs["runtime"]),
            "XDG_CACHE_HOME": str(self.dirs["cache"]),
            "XDG_DATA_HOME": str(self.dirs["data"]),
            "LC_ALL": "C",
        }

    def _write_config(self):
        conf = self.dirs["config"] / "libvirt"
        conf.mkdir(parents=True)
        (conf / "qemu.conf").write_text('stdio_handler = "file"\n')
        (conf / "libvirtd.conf").write_text(
            f'log_outputs = "3:file:{self.log}"\n')
        return conf / "libvirtd.conf"

    def start(self):
        """Start libvirtd and wait for its socket; LibvirtdError if it cannot
        run here (the message says why, with its log's tail)."""
        self.base.mkdir(parents=True, exist_ok=True)
        self._check_reachable()
        for d in self.dirs.values():
            d.mkdir(mode=0o700, exist_ok=True)
        conf = self._write_config()
        self.log.touch()
        for path in [self.base, *self.base.rglob("*")]:
            os.chown(path, self.uid, self.gid)
        self.base.chmod(0o711)
        cmd = [_which(LIBVIRTD), "-f", str(conf)]
        if os.geteuid() == 0:
            # --pdeathsig after the uid change: a test run that dies takes
            # libvirtd with it (a change of uid clears an earlier one).
            cmd = [_which("setpriv"), f"--reuid={self.uid}",
                   f"--regid={self.gid}", "--clear-groups",
                   "--pdeathsig=TERM"] + cmd
        self.proc = subprocess.Popen(
            cmd, env=self._env(), cwd=self.base, stdin=subprocess.DEVNULL,
            stdout=open(self.base / "libvirtd.out", "w"),
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LibvirtdError(
                    f"libvirtd exited {self.proc.returncode} at start-up:\n"
                    f"{self.output_tail()}")
            if self.socket.is_socket() and self.virsh("uri", check=False).returncode == 0:
                return self
            time.sleep(0.2)
        self.stop()
        raise LibvirtdError(f"libvirtd's socket {self.socket} did not answer "
                            f"within {START_TIMEOUT_S} s:\n{self.output_tail()}")

    def _check_reachable(self):
        """libvirtd (and QEMU) run as self.uid: every directory above `base`
        must let them through, or libvirtd only says "Permission denied"
        about its configuration file."""
        if self.uid == os.getuid():
            return
        for parent in self.base.resolve().parents:
            st = parent.stat()
            if st.st_uid != self.uid and not st.st_mode & 0o001:
                raise LibvirtdError(
                    f"{parent} is not searchable by {UNPRIVILEGED_USER} "
                    f"(mode {st.st_mode & 0o777:o}), who runs libvirtd: give "
                    "Libvirtd a directory under /tmp")

    def stop(self):
        """Destroy every domain still running, then stop libvirtd by its pid
        (SIGTERM; SIGKILL after STOP_TIMEOUT_S).  Returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            for name in self.domains():
                self.virsh("destroy", name, check=False)
        self._kill_leftover_qemus()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def _kill_leftover_qemus(self):
        """QEMU runs detached from libvirtd: should one outlive `destroy`
        (or libvirtd), end it by the pid libvirt recorded."""
        run = self.dirs["runtime"] / "libvirt" / "qemu" / "run"
        for pidfile in run.glob("*.pid") if run.is_dir() else ():
            if pidfile.name == "driver.pid":
                continue
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (ValueError, OSError):
                pass

    # --- using it ------------------------------------------------------------

    def virsh(self, *args, check=True, timeout=60):
        """Run virsh against this daemon; returns the CompletedProcess, or
        raises LibvirtdError with its output when `check` and it failed."""
        proc = subprocess.run([_which(VIRSH), "-q", "-c", self.uri, *args],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "LC_ALL": "C"})
        if check and proc.returncode != 0:
            raise LibvirtdError(f"virsh {' '.join(args)} exited "
                                f"{proc.returncode}: {proc.stderr.strip()}")
        return proc

    def domains(self):
        """Names of the domains this daemon knows, running or not."""
        proc = self.virsh("list", "--all", "--name", check=False)
        return [n for n in proc.stdout.split() if n] if proc.returncode == 0 else []

    def give(self, path):
        """Let the user QEMU runs as open `path` (a socket Spindle made
        0600), as a user hands it to libvirt-qemu."""
        if os.geteuid() == 0:
            os.chown(path, self.uid, self.gid)

    def shared_dir(self, path):
        """Make directory `path` one QEMU can create files in (its console
        socket) and reach what is below it."""
        path = Path(path)
        path.mkdir(exist_ok=True)
        self.give(path)
        path.chmod(0o755)
        return path

    def qemu_log(self, name):
        """What QEMU printed for domain `name`, with the command line
        libvirt gave it ("" if there is no log)."""
        log = self.dirs["cache"] / "libvirt" / "qemu" / "log" / f"{name}.log"
        try:
            return log.read_text(errors="replace")
        except OSError:
            return ""

    def output_tail(self, chars=3000):
        text = ""
        for path in (self.base / "libvirtd.out", self.log):
            try:
                text += path.read_text(errors="replace")
            except OSError:
                pass
        return text[-chars:]


class Console:
    """The client end of a domain's serial port, a UNIX socket QEMU listens
    on (`<serial type='unix'><source mode='bind' path=.../>`).  Start the
    domain paused, connect, then resume it: nothing the guest prints is
    lost, and what `send()` writes is its console's input."""

    def __init__(self, path, log=None):
        self.path, self.log = str(path), log
        self.sock = None
        self.text = ""

    def connect(self, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
                self.sock = s
                return self
            except OSError:
                s.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def wait_for(self, marker, timeout):
        """Read the console until `marker` has appeared; returns True, or
        False when the time ran out or QEMU closed the console."""
        deadline = time.monotonic() + timeout
        while marker not in self.text:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ready, _, _ = select.select([self.sock], [], [], min(left, 1.0))
            if not ready:
                continue
            data = self.sock.recv(65536)
            if not data:
                return marker in self.text
            chunk = data.decode("utf-8", "replace").replace("\r\n", "\n")
            self.text += chunk
            if self.log:
                with open(self.log, "a") as f:
                    f.write(chunk)
        return True

    def send(self, text):
        self.sock.sendall(text.encode())

    def close(self):
        if self.sock:
            self.sock.close()
            self.sock = None


def guest_domain_xml(text, name, socket_path, kernel, initrd, cmdline, console,
                     mem_mib=512, vcpus=2):
    """A user's domain XML (docs/user-guide.md) turned into a test guest.

    Only what ties it to a host changes: TCG (`type='qemu'`), the name,
    memory and vCPUs, the disk's socket path, a direct kernel boot of
    `kernel` + `initrd` with `cmdline`, and the serial port, which becomes
    the UNIX socket `console` (Console) instead of a pty.  The memory
    backing, the disk's driver, reconnect and target, the IOThreads and the
    features stay as the user wrote them, so the test runs the XML the
    guide shows."""
    dom = ET.fromstring(text)
    dom.set("type", "qemu")
    dom.find("name").text = name
    mem = dom.find("memory")
    mem.set("unit", "MiB")
    mem.text = str(mem_mib)
    dom.find("vcpu").text = str(vcpus)
    os_el = dom.find("os")
    for tag, value in (("kernel", kernel), ("initrd", initrd),
                       ("cmdline", cmdline)):
        ET.SubElement(os_el, tag).text = str(value)
    devices = dom.find("devices")
    sources = devices.findall("disk[@type='vhostuser']/source")
    if len(sources) != 1:
        raise ValueError(f"expected one vhostuser disk, found {len(sources)}")
    sources[0].set("path", str(socket_path))
    for tag in ("serial", "console"):
        for el in devices.findall(tag):
            devices.remove(el)
    serial = ET.SubElement(devices, "serial", type="unix")
    ET.SubElement(serial, "source", mode="bind", path=str(console))
    ET.SubElement(serial, "target", port="0")
    for tag in ("on_poweroff", "on_reboot", "on_crash"):
        if dom.find(tag) is None:
            ET.SubElement(dom, tag).text = "destroy"
    return ET.tostring(dom, encoding="unicode")
