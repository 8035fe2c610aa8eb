# Convenience wrapper around meson and ninja.  The real build description is
# in meson.build; this file only strings the usual steps together.
# `make help` lists the targets.

BUILD      := build
BUILD_SAN  := build-san
BUILD_FUZZ := build-fuzz
PYTHON     ?= python3
BENCH_ARGS ?=
PYTEST_ARGS ?=
FUZZ_ARGS  ?=
SOAK_ARGS  ?=
CRASH_SOAK_ARGS ?= 10
MIGRATE_SOAK_ARGS ?= 20
# Seconds of fuzzing per harness in check-fuzz (7 harnesses: about 60 s).
CHECK_FUZZ_TIME ?= 8

# Sanitizer settings for the unit tests in $(BUILD_SAN).
SAN_ENV := ASAN_OPTIONS=detect_leaks=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

MAKEFLAGS += --no-print-directory

.PHONY: all san fuzz deps check check-unit check-functional check-fuzz \
        fuzz-run soak crash-soak migrate-soak install bench-aio bench-block bench-compare \
        poll-frontier demo clean help

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)

# The sanitizer build: address + undefined behaviour.
san: $(BUILD_SAN)/build.ninja
	ninja -C $(BUILD_SAN)

# The libFuzzer harnesses (tests/fuzz/): clang, address + undefined
# behaviour, every file instrumented for coverage.
fuzz: $(BUILD_FUZZ)/build.ninja
	ninja -C $(BUILD_FUZZ)

$(BUILD)/build.ninja:
	bash ./configure --builddir=$(BUILD)

$(BUILD_SAN)/build.ninja:
	bash ./configure --builddir=$(BUILD_SAN) --enable-sanitizers

$(BUILD_FUZZ)/build.ninja:
	CC=clang bash ./configure --builddir=$(BUILD_FUZZ) --enable-sanitizers \
	    --enable-fuzzing --disable-tests

deps:
	PYTHON=$(PYTHON) bash scripts/install-deps.sh

# Everything CI runs, in order; the pytest summary is the last thing printed.
check: deps
	$(MAKE) check-unit
	$(MAKE) check-functional
	$(MAKE) check-fuzz

check-unit: all san
	meson test -C $(BUILD) --print-errorlogs
	$(SAN_ENV) meson test -C $(BUILD_SAN) --print-errorlogs

check-functional: all
	SPINDLE_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -v tests/functional $(PYTEST_ARGS)

# Every harness over its checked-in corpus, then a short run of each; what
# the run finds goes to $(BUILD_FUZZ)/check-fuzz/, never into the tree.
check-fuzz: fuzz
	BUILD_FUZZ=$(BUILD_FUZZ) $(PYTHON) scripts/fuzz-run --no-build \
	    --time $(CHECK_FUZZ_TIME) --out $(BUILD_FUZZ)/check-fuzz

# A fuzzing campaign (scripts/fuzz-run --help): FUZZ_ARGS="--time 600".
fuzz-run: fuzz
	BUILD_FUZZ=$(BUILD_FUZZ) $(PYTHON) scripts/fuzz-run --no-build $(FUZZ_ARGS)

# A verify soak (scripts/soak --help), 10 minutes by default; under ASan:
# make san soak SOAK_ARGS="--build $(BUILD_SAN)".
soak: all
	$(PYTHON) scripts/soak --build $(BUILD) $(SOAK_ARGS)

# Kill spindle N times under a writing guest (scripts/crash-soak --help):
# CRASH_SOAK_ARGS="100" for the recorded run, the cycle count first.
crash-soak: all
	$(PYTHON) scripts/crash-soak --build $(BUILD) $(CRASH_SOAK_ARGS)

# Migrate a writing guest N times back and forth, on Spindle and then on
# qemu-storage-daemon (scripts/migrate-soak --help): the recorded run is 20.
migrate-soak: all
	$(PYTHON) scripts/migrate-soak --build $(BUILD) $(MIGRATE_SOAK_ARGS)

# DESTDIR=DIR installs under DIR (for packaging); the prefix is
# ./configure --prefix's.
install: all
	meson install -C $(BUILD) $(if $(DESTDIR),--destdir $(abspath $(DESTDIR)))

bench-aio: all
	@test -x $(BUILD)/tests/bench/bench-aio || \
	    { echo "bench-aio is not built: it needs json-glib and -Dtests=true"; exit 1; }
	$(BUILD)/tests/bench/bench-aio $(BENCH_ARGS)

bench-block: all
	@test -x $(BUILD)/tests/bench/bench-block || \
	    { echo "bench-block is not built: it needs json-glib and -Dtests=true"; exit 1; }
	$(BUILD)/tests/bench/bench-block $(BENCH_ARGS)

# Spindle against qemu-storage-daemon with spindle-bench: table, JSON, plots
# in bench-results/<timestamp>/ (scripts/bench-compare --help).
bench-compare: all
	SPINDLE_BUILD=$(abspath $(BUILD)) $(PYTHON) scripts/bench-compare $(BENCH_ARGS)

# Fixed poll windows against the policies, one daemon, live qom-set: table,
# verdicts, JSON, plot in bench-results/poll-frontier-<timestamp>/
# (scripts/poll-frontier --help).
poll-frontier: all
	SPINDLE_BUILD=$(abspath $(BUILD)) $(PYTHON) scripts/poll-frontier $(BENCH_ARGS)

# Installs what it needs, builds, boots a guest on a disk served by spindle.
demo:
	PYTHON=$(PYTHON) BUILD=$(BUILD) bash scripts/demo.sh

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_FUZZ)

help:
	@echo 'Targets:'
	@echo '  all               configure $(BUILD)/ if needed and build it (default)'
	@echo '  check             install dependencies, then check-unit, check-functional'
	@echo '                    and check-fuzz'
	@echo '  check-unit        unit tests in $(BUILD)/ and in $(BUILD_SAN)/ (ASan + UBSan)'
	@echo '  check-functional  pytest suite in tests/functional against $(BUILD)/'
	@echo '  check-fuzz        every fuzz harness over its corpus, then $(CHECK_FUZZ_TIME) s each'
	@echo '  fuzz              configure and build $(BUILD_FUZZ)/ (clang, libFuzzer)'
	@echo '  fuzz-run          a fuzzing campaign (FUZZ_ARGS: scripts/fuzz-run --help)'
	@echo '  soak              spindle-bench --verify on four exports with QMP traffic,'
	@echo '                    10 minutes (SOAK_ARGS: scripts/soak --help)'
	@echo '  crash-soak        SIGKILL and restart spindle under a writing guest, 10 times'
	@echo '                    (CRASH_SOAK_ARGS: scripts/crash-soak --help)'
	@echo '  migrate-soak      migrate a writing guest 20 times, Spindle then'
	@echo '                    qemu-storage-daemon (MIGRATE_SOAK_ARGS: scripts/migrate-soak --help)'
	@echo '  install           meson install from $(BUILD)/: the programs and, when'
	@echo '                    scdoc was found, the manual pages (DESTDIR=DIR: under DIR)'
	@echo '  bench-aio         build, then run the event loop benchmark'
	@echo '  bench-block       build, then run the block layer benchmark'
	@echo '  bench-compare     spindle vs qemu-storage-daemon side by side (--quick: < 3 min)'
	@echo '  poll-frontier     poll policies against fixed poll windows (--quick: < 4 min)'
	@echo '  demo              boot a Linux guest (QEMU, TCG) on a disk spindle serves'
	@echo '  deps              run scripts/install-deps.sh'
	@echo '  san               configure and build $(BUILD_SAN)/ only'
	@echo '  clean             remove $(BUILD)/, $(BUILD_SAN)/ and $(BUILD_FUZZ)/'
	@echo '  help              this text'
	@echo
	@echo 'Variables:'
	@echo '  BENCH_ARGS=...    arguments for bench-aio, bench-block, bench-compare and'
	@echo '                    poll-frontier'
	@echo '  PYTEST_ARGS=...   extra pytest arguments, e.g. PYTEST_ARGS="-k qmp"'
	@echo '  FUZZ_ARGS=...     scripts/fuzz-run arguments for fuzz-run'
	@echo '  SOAK_ARGS=...     scripts/soak arguments for soak, e.g. SOAK_ARGS="--time 60"'
	@echo '  CRASH_SOAK_ARGS=... scripts/crash-soak arguments, cycles first, e.g. "100"'
	@echo '  MIGRATE_SOAK_ARGS=... scripts/migrate-soak arguments, migrations first'
	@echo '  PYTHON=...        Python for pytest and deps (default: python3)'
	@echo '  DESTDIR=DIR       install: put the files under DIR'
	@echo
	@echo 'Other configurations: ./configure --help, then ninja -C <dir>.'
