"""Getting ready (dependencies, the build, the tools) and machine facts."""

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QSD_NAME = "qemu-storage-daemon"


class SetupError(RuntimeError):
    """Something the run needs is missing; the message says how to get it."""


def install_deps(log, tool="bench-compare",
                 needs="qemu-storage-daemon, taskset, matplotlib"):
    """Run scripts/install-deps.sh for the Python running this script.

    `tool` and `needs` name the caller and what it needs, for the message
    that says how to go on without the script.
    """
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "install-deps.sh")],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    log(proc.stdout.rstrip())
    if proc.returncode != 0:
        raise SetupError("scripts/install-deps.sh failed (see above); install what it "
                         f"names, or pass --skip-deps if you have what {tool} "
                         f"needs ({needs})")


def build(build_dir, log_path):
    """`make BUILD=build_dir all` in the tree; the output goes to log_path."""
    with open(log_path, "w") as logf:
        proc = subprocess.run(["make", "-C", str(ROOT), f"BUILD={build_dir}", "all"],
                              stdout=logf, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = Path(log_path).read_text(errors="replace").splitlines()[-25:]
        raise SetupError("the build failed (log: {}):\n{}".format(
            log_path, "\n".join("    " + line for line in tail)))


def default_build_dir():
    """$SPINDLE_BUILD (as the tests use it), else build/ in the tree."""
    env = os.environ.get("SPINDLE_BUILD")
    return Path(env).resolve() if env else ROOT / "build"


def find_qsd(explicit=None):
    """qemu-storage-daemon: --qsd, else $SPINDLE_QSD, else on $PATH."""
    for cand in (explicit, os.environ.get("SPINDLE_QSD")):
        if cand:
            if os.access(cand, os.X_OK):
                return Path(cand).resolve()
            raise SetupError(f"{cand} is not an executable (qemu-storage-daemon)")
    path = shutil.which(QSD_NAME)
    if not path:
        raise SetupError("qemu-storage-daemon is not installed; on Debian: "
                         "apt install qemu-system-common  (or point --qsd at it)")
    return Path(path)


def check_tools(spindle, bench, qsd=None):
    """Raise SetupError naming the first missing program (qsd: if given)."""
    if not shutil.which("taskset"):
        raise SetupError("taskset is not installed; on Debian: apt install util-linux")
    if not os.access(spindle, os.X_OK):
        raise SetupError(f"{spindle} is not built (run make, or set SPINDLE_BUILD)")
    if not os.access(bench, os.X_OK):
        raise SetupError(f"{bench} is not built (spindle-bench; run make, or point "
                         "--bench at it)")
    if qsd is not None and not os.access(qsd, os.X_OK):
        raise SetupError(f"{qsd} is not executable")


def check_cpus(daemon_cpu, bench_cpu):
    """Both CPUs usable by this process; returns a warning or None."""
    usable = os.sched_getaffinity(0)
    for what, cpu in (("--daemon-cpu", daemon_cpu), ("--bench-cpu", bench_cpu)):
        if cpu not in usable:
            raise SetupError(f"{what} {cpu}: not a CPU this process may use "
                             f"({_cpu_list(usable)})")
    if daemon_cpu == bench_cpu:
        return ("the daemons and the benchmark share CPU "
                f"{daemon_cpu}: latencies include their contention")
    return None


def _cpu_list(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def _first_line(cmd):
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        out = (proc.stdout or proc.stderr).strip().splitlines()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model():
    """The CPU's model name from /proc/cpuinfo, or the machine type."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def facts(spindle, bench, qsd=None):
    """Facts about the machine and the programs, for the JSON file.

    Without `qsd`, qemu_version and qemu_storage_daemon are None.
    """
    mem_kib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except (OSError, ValueError):
        pass
    os_release = {}
    try:
        with open("/etc/os-release") as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                os_release[k] = v.strip('"')
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "usable_cpus": _cpu_list(os.sched_getaffinity(0)),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "os": os_release.get("PRETTY_NAME"),
        "mem_total_mib": mem_kib // 1024 if mem_kib else None,
        "qemu_version": _first_line([str(qsd), "--version"]) if qsd else None,
        "spindle_version": _first_line([str(spindle), "--version"]),
        "spindle_git_describe": _first_line(
            ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--tags"]),
        "spindle": str(spindle),
        "spindle_bench": str(bench),
        "qemu_storage_daemon": str(qsd) if qsd else None,
        "python": platform.python_version(),
    }


def machine_note(f, daemon_cpu, bench_cpu):
    """One line for titles: the machine and the pinning."""
    return (f"{f['nproc']} CPUs ({f['cpu_model']}), Linux {f['kernel']}; "
            f"all daemon threads share CPU {daemon_cpu}, bench on CPU {bench_cpu}")


def bench_programs(build_dir, bench=None):
    """The daemon and spindle-bench: from build_dir, or bench as given."""
    return {
        "spindle": build_dir / "daemon" / "spindle",
        "bench": bench.resolve() if bench else build_dir / "tools" / "bench" / "spindle-bench",
    }


def require_matplotlib():
    """SetupError unless matplotlib imports (the plots need it)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SetupError(f"matplotlib is missing for {sys.executable}: run "
                         "scripts/install-deps.sh as root, or pip install matplotlib, "
                         "or pass --no-plots")


def write_json(path, data):
    """Write data to path as JSON, atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path
