"""One spindle-bench run against one daemon, retried once if it fails.

spindle-bench exits 0 when the run went well, 1 when the run failed and 2
on a setup error (one line on stderr); with --json it prints one object on
stdout.  A run that does not exit 0 with a JSON object, or that outlives
its time limit, is run once more; if that fails too it is recorded as
failed and the matrix goes on.
"""

import json
import subprocess
import time

# Seconds a run may take beyond --ramp + --runtime (connecting, set-up,
# report) before it is killed.
RUN_SLACK_S = 30


def bench_command(opts, socket, load, backend_pid, seed, completion=None,
                  phases=None):
    """The spindle-bench command line for one run, pinned to opts.bench_cpu.

    `completion` ("poll" or "interrupt") overrides opts.completion.  With
    `phases`, a list of (seconds, "qdN" | "rate=IOPS" | "idle"), the run is
    spindle-bench --phase instead of `load` (None) and opts.runtime.
    """
    if phases:
        shape = [f"--phase={s:g}:{what}" for s, what in phases]
    else:
        shape = [f"--iodepth={load.iodepth}", f"--runtime={opts.runtime:g}"]
    queues = getattr(load, "queues", 1) if load else 1
    cmd = ["taskset", "-c", str(opts.bench_cpu), str(opts.bench),
           f"--socket={socket}", f"--queues={queues}", f"--cpus={opts.bench_cpu}",
           f"--rw={opts.rw}", f"--bs={opts.bs}", *shape, f"--ramp={opts.ramp:g}",
           f"--completion={completion or opts.completion}",
           f"--backend-pid={backend_pid}",
           f"--seed={seed}", f"--connect-timeout={opts.connect_timeout_ms}",
           "--json"]
    if opts.rw == "randrw":
        cmd.append(f"--rwmixread={opts.rwmixread}")
    if not phases and load.open_loop:
        cmd.append(f"--rate={load.rate}")
    return cmd


def run_once(cmd, timeout_s, preexec_fn=None):
    """Run spindle-bench once: a dict with exit, seconds, stderr, result."""
    t0 = time.monotonic()
    attempt = {"exit": None, "seconds": None, "stderr": "", "result": None,
               "error": None}
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout_s, preexec_fn=preexec_fn)
    except subprocess.TimeoutExpired as e:
        attempt["seconds"] = round(time.monotonic() - t0, 3)
        attempt["error"] = f"killed after {timeout_s:g} s"
        attempt["stderr"] = _text(e.stderr)
        return attempt
    attempt["seconds"] = round(time.monotonic() - t0, 3)
    attempt["exit"] = proc.returncode
    attempt["stderr"] = proc.stderr[-4000:]
    if proc.returncode != 0:
        attempt["error"] = (f"exit status {proc.returncode}: "
                            f"{_last_line(proc.stderr) or '(nothing on stderr)'}")
        return attempt
    try:
        result = json.loads(proc.stdout)
    except ValueError as e:
        attempt["error"] = f"output is not JSON ({e})"
        attempt["stdout"] = proc.stdout[-2000:]
        return attempt
    if not isinstance(result, dict) or "lat_ns" not in result:
        attempt["error"] = "JSON output without lat_ns"
        attempt["stdout"] = proc.stdout[-2000:]
        return attempt
    attempt["result"] = result
    return attempt


def run_with_retry(cmd, timeout_s, before_retry=None, preexec_fn=None):
    """run_once, and once more if that failed.

    `before_retry` is called between the two (to restart a daemon that died).
    Returns (result or None, [attempts]).
    """
    attempts = [run_once(cmd, timeout_s, preexec_fn)]
    if attempts[0]["result"] is None:
        if before_retry:
            before_retry()
        attempts.append(run_once(cmd, timeout_s, preexec_fn))
    return attempts[-1]["result"], attempts


def _last_line(text):
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _text(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data
