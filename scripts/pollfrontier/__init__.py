"""poll-frontier: busy-poll policies on the frontier of fixed windows.

scripts/poll-frontier is the command; this package holds its parts and
reuses bench-compare's (scripts/benchcompare: the build and machine facts,
spindle-bench's command line and retry, the pinned daemon, medians):

    cells.py     configurations (fixed windows, policies), loads, cells
    daemon.py    the one daemon's command line, QMP helpers, the idle
                 front-ends of the idle63 cell
    qmp.py       a small blocking QMP client
    verdicts.py  the verdicts, pure functions (unit-tested)
    loadstep.py  the load step's analysis, pure (unit-tested)
    phase.py     machine phases: runs spindle-cpuprobe; which runs to
                 repeat and which to keep (unit-tested)
    report.py    medians per (cell, config), the tables
    plots.py     the frontier PNG (matplotlib, Agg backend)
    main.py      the options and the order of events
"""
