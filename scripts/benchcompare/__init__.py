"""bench-compare: Spindle and qemu-storage-daemon side by side.

scripts/bench-compare is the command; this package holds its parts, one
concern each:

    matrix.py    the cells of the matrix (service time, poll setting, load)
                 and the parsing of their command-line spellings
    backends.py  the two daemons: one command line for both, start pinned to
                 a CPU, readiness, CPU time from /proc, stop
    runner.py    one spindle-bench run (command line, retry, JSON result)
    machine.py   dependencies, the build, and the facts about the machine
    report.py    medians over repeats, the table, the goals
    plots.py     the PNG plots (matplotlib, Agg backend)
    main.py      the options and the order of events
"""
