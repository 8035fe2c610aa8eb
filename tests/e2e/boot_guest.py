#!/usr/bin/env python3
"""Boot a guest on a running vhost-user-blk daemon and run a verified workload.

Used by scripts/demo.sh; handy by hand too.  The daemon must already be
serving SOCKET (this waits for it to listen).  The guest writes a known
pattern to /dev/vda with O_DIRECT, reads it back and compares; with --image
the host then checks that the image file holds the same bytes.  Prints the
guest's results and exits 0 only if everything checked out.

    python3 tests/e2e/boot_guest.py --socket /tmp/x/vda.sock --queues 2 \\
        --image /tmp/x/vda.img --size 64M
"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import daemons  # noqa: E402
import guest  # noqa: E402

MiB = 1 << 20


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="the export's UNIX socket")
    ap.add_argument("--queues", type=int, default=1, help="num-queues of the device")
    ap.add_argument("--smp", type=int, default=0,
                    help="guest vCPUs (default: as many as queues, at most 4)")
    ap.add_argument("--size", type=parse_size, default=None,
                    help="expected disk size (checked if given)")
    ap.add_argument("--serial", default=None, help="expected serial (checked if given)")
    ap.add_argument("--image", default=None,
                    help="image file to check for the guest's data afterwards")
    ap.add_argument("--write", type=parse_size, default=8 * MiB,
                    help="bytes of pattern the guest writes (default 8M)")
    ap.add_argument("--offset", type=parse_size, default=1 * MiB,
                    help="where the pattern goes (default 1M)")
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--no-firmware-probe", action="store_true",
                    help="boot with edd=off, so that the kernel's EDD probe does "
                    "not read the disk through SeaBIOS's driver first")
    ap.add_argument("--console-log", default=None, help="also write the console here")
    ap.add_argument("--echo", action="store_true", help="show the console as it runs")
    ap.add_argument("--cache-dir", default=None,
                    help=f"initramfs cache (default {guest.default_cache_dir()})")
    args = ap.parse_args(argv)

    reasons = guest.missing_prerequisites()
    if reasons:
        print("boot_guest: cannot boot a guest: " + "; ".join(reasons), file=sys.stderr)
        return 2
    try:
        daemons.wait_for(lambda: daemons.is_listening(os.path.abspath(args.socket)),
                         f"{args.socket} to listen", 15)
    except daemons.DaemonError:
        print(f"boot_guest: nothing listens on {args.socket}", file=sys.stderr)
        return 2

    pattern = guest.pattern_bytes(args.write, seed=0xd3e0)
    tail_pattern = guest.pattern_bytes(64 * 1024, seed=0x7a11)
    work = guest.blk_workload("vda", pattern=pattern, pattern_offset=args.offset,
                              tail_pattern=tail_pattern)
    smp = args.smp or max(1, min(args.queues, 4))
    run = guest.run_guest([guest.Disk(os.path.abspath(args.socket),
                                      num_queues=args.queues)],
                          work.script, files=work.files, smp=smp,
                          timeout=args.timeout, cache_dir=args.cache_dir,
                          console_log=args.console_log, echo=args.echo,
                          append_extra=guest.NO_FIRMWARE_DISK_PROBE
                          if args.no_firmware_probe else "")
    res = run.results
    checks = []

    def check(what, ok, detail=""):
        checks.append(ok)
        print(f"  [{'ok' if ok else 'FAIL'}] {what}{': ' + detail if detail else ''}")

    print(f"guest: booted and finished in {run.seconds:.1f} s "
          f"(QEMU TCG, {smp} vCPUs, qemu exit {run.returncode})")
    check("guest ran its script to the end", run.finished,
          "" if run.finished else "stages " + ",".join(run.stages))
    check("guest sees /dev/vda", res.get("vda.present") == "1")
    sectors = int(res.get("vda.size_sectors", "0") or 0)
    size_ok = args.size is None or sectors * 512 == args.size
    check("size", size_ok, f"{sectors} sectors = {sectors * 512 // MiB} MiB"
          + ("" if args.size is None else f" (expected {args.size // MiB} MiB)"))
    serial = res.get("vda.serial", "?")
    check("serial", args.serial is None or serial == args.serial, repr(serial))
    hwq = res.get("vda.hw_queues", "?")
    check("hardware queues", hwq == str(args.queues), f"{hwq} (num-queues={args.queues})")
    print(f"         discard_max_bytes={res.get('vda.discard_max_bytes')} "
          f"write_zeroes_max_bytes={res.get('vda.write_zeroes_max_bytes')} "
          f"write_cache={res.get('vda.cache_type')!r} "
          f"O_DIRECT={'yes' if res.get('vda.direct') == '1' else 'no'}")
    for name, data, where in (("pattern", pattern, f"at {args.offset // MiB} MiB"),
                              ("tail", tail_pattern, "in the last 64 KiB")):
        ok = (res.get(f"vda.{name}_write_rc") == "0"
              and res.get(f"vda.{name}_verify") == "ok"
              and res.get(f"vda.{name}_md5") == guest.md5(data))
        check(f"guest wrote {len(data) // 1024} KiB {where}, read back, compared",
              ok, f"md5 {res.get(f'vda.{name}_md5')}")
    if args.image:
        with open(args.image, "rb") as f:
            f.seek(args.offset)
            body = f.read(len(pattern))
            f.seek(-len(tail_pattern), os.SEEK_END)
            end = f.read(len(tail_pattern))
        check(f"host: {args.image} holds the guest's data",
              body == pattern and end == tail_pattern)
    for w in run.warnings:
        print(f"  guest warning: {w}")
    if not all(checks):
        print("console tail:\n" + guest.tail(run.console), file=sys.stderr)
        return 1
    print("guest result: VERIFIED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
