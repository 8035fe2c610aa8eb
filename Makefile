# Convenience wrapper around meson and ninja.  The real build description is
# in meson.build; this file only strings the usual steps together.
# `make help` lists the targets.

BUILD      := build
BUILD_SAN  := build-san
PYTHON     ?= python3
BENCH_ARGS ?=
PYTEST_ARGS ?=

# Sanitizer settings for the unit tests in $(BUILD_SAN).
SAN_ENV := ASAN_OPTIONS=detect_leaks=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

MAKEFLAGS += --no-print-directory

.PHONY: all san deps check check-unit check-functional install bench-aio \
        bench-block bench-compare poll-frontier demo clean help

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)

# The sanitizer build: address + undefined behaviour.
san: $(BUILD_SAN)/build.ninja
	ninja -C $(BUILD_SAN)

$(BUILD)/build.ninja:
	bash ./configure --builddir=$(BUILD)

$(BUILD_SAN)/build.ninja:
	bash ./configure --builddir=$(BUILD_SAN) --enable-sanitizers

deps:
	PYTHON=$(PYTHON) bash scripts/install-deps.sh

# Everything CI runs, in order; the pytest summary is the last thing printed.
check: deps
	$(MAKE) check-unit
	$(MAKE) check-functional

check-unit: all san
	meson test -C $(BUILD) --print-errorlogs
	$(SAN_ENV) meson test -C $(BUILD_SAN) --print-errorlogs

check-functional: all
	SPINDLE_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -v tests/functional $(PYTEST_ARGS)

install: all
	meson install -C $(BUILD)

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
	rm -rf $(BUILD) $(BUILD_SAN)

help:
	@echo 'Targets:'
	@echo '  all               configure $(BUILD)/ if needed and build it (default)'
	@echo '  check             install dependencies, then check-unit and check-functional'
	@echo '  check-unit        unit tests in $(BUILD)/ and in $(BUILD_SAN)/ (ASan + UBSan)'
	@echo '  check-functional  pytest suite in tests/functional against $(BUILD)/'
	@echo '  install           meson install from $(BUILD)/'
	@echo '  bench-aio         build, then run the event loop benchmark'
	@echo '  bench-block       build, then run the block layer benchmark'
	@echo '  bench-compare     spindle vs qemu-storage-daemon side by side (--quick: < 3 min)'
	@echo '  poll-frontier     poll policies against fixed poll windows (--quick: < 4 min)'
	@echo '  demo              boot a Linux guest (QEMU, TCG) on a disk spindle serves'
	@echo '  deps              run scripts/install-deps.sh'
	@echo '  san               configure and build $(BUILD_SAN)/ only'
	@echo '  clean             remove $(BUILD)/ and $(BUILD_SAN)/'
	@echo '  help              this text'
	@echo
	@echo 'Variables:'
	@echo '  BENCH_ARGS=...    arguments for bench-aio, bench-block, bench-compare and'
	@echo '                    poll-frontier'
	@echo '  PYTEST_ARGS=...   extra pytest arguments, e.g. PYTEST_ARGS="-k qmp"'
	@echo '  PYTHON=...        Python for pytest and deps (default: python3)'
	@echo
	@echo 'Other configurations: ./configure --help, then ninja -C <dir>.'
