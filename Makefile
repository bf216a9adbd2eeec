# quartet — the everyday entry points.
#
#   make          build build/quartet and the tests (runs `make deps` first)
#   make test     deps, build, then every test through ctest (MPI tests launch mpirun themselves)
#   make run      deps, build, then the CPU demo: the whole pipeline (SFT, a reward model, PPO and
#                 GRPO) on tiny models learning to sort digits; DECK=... runs one deck instead
#   make deps     check (and on Debian/Ubuntu install) what the build needs; find LibTorch
#   make clean    remove build/
#   make help     this summary, with the variables you can set
#
# The targets are thin: their shell logic is in cmake/deps.sh (system packages, LibTorch),
# cmake/build.sh (configure when needed, then build) and cmake/run.sh (mpirun on the ranks that
# `quartet plan DECK --ranks-needed` names) and cmake/pipeline.sh (the demo), which ctest's
# shellcheck test checks.

SHELL := /bin/bash
.DEFAULT_GOAL := build

# ---- Pins: the Python environment that provides LibTorch (and transformers for parity tests) ---
TORCH_VERSION        := 2.11.0
TRANSFORMERS_VERSION := 5.17.0
PY_PACKAGES := torch==$(TORCH_VERSION) transformers==$(TRANSFORMERS_VERSION) \
               safetensors numpy h5py matplotlib pyarrow

# ---- Where things go ------------------------------------------------------------------------------
BUILD := build
# The pinned venv lives outside the clone, shared by every clone of the same pins.
VENV  := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/quartet/venv-torch$(TORCH_VERSION)-transformers$(TRANSFORMERS_VERSION)
PYTHON3 := python3

# ---- Knobs, set on the command line (make test CTEST_JOBS=2); := so that a stray environment
# variable of the same name (conda sets CMAKE_ARGS, for one) does not leak in ------------------
JOBS       :=# parallel compile jobs (empty: ninja's default)
# ctest's parallel tests: three times the cores (tests often wait: on their processes' start, on MPI)
CTEST_JOBS := $(shell echo $$((3 * $$(nproc 2>/dev/null || echo 1))))
CTEST_ARGS :=# extra ctest arguments, e.g. -R deck
CMAKE_ARGS :=# extra cmake options (-DQUARTET_WERROR=ON); kept in the CMake cache
DECK       :=# empty: make run runs the pipeline demo (cmake/pipeline.sh); else quartet COMMAND DECK
COMMAND    := train# the quartet command make run runs (selfcheck with DECK=inputs/selfcheck.deck)
NP         :=# ranks for make run (empty: quartet plan DECK --ranks-needed, else 4)
RUN_ARGS   :=# extra quartet arguments for make run, e.g. --set dist.watchdog_timeout=30
# RESUME=1 (environment or command line): make run continues the demo instead of starting afresh
SKIP_SYSTEM_DEPS ?=# 1 (environment or command line): skip the system package check

# Debian/Ubuntu packages the build and the tests need.
SYSTEM_PACKAGES := build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin \
                   libhdf5-openmpi-dev hdf5-tools libboost-program-options-dev libgtest-dev \
                   nlohmann-json3-dev libpcre2-dev libicu-dev zlib1g-dev libxxhash-dev libssl-dev libcurl4-openssl-dev python3-venv python3-dev \
                   ccache shellcheck

# What the scripts read from the environment. Torch_DIR, CMAKE_PREFIX_PATH and QUARTET_PYTHON
# come from your environment or the make command line, if you set them.
export BUILD VENV PYTHON3 PY_PACKAGES SYSTEM_PACKAGES SKIP_SYSTEM_DEPS JOBS CMAKE_ARGS NP RESUME
export Torch_DIR CMAKE_PREFIX_PATH QUARTET_PYTHON

.PHONY: all build deps test run clean help

all: build

deps:
	@bash cmake/deps.sh

build: deps
	@bash cmake/build.sh

# ctest honours each test's TIMEOUT property from CMake; MPI tests start mpirun themselves.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(CTEST_JOBS) $(CTEST_ARGS)

# The pipeline demo (cmake/pipeline.sh), or one deck under mpirun (cmake/run.sh: Open MPI as
# root, one OpenMP thread per rank, inputs/demo.deck afresh unless RESUME=1).
run: build
	@if [ -z "$(DECK)" ]; then bash cmake/pipeline.sh; else bash cmake/run.sh "$(COMMAND)" "$(DECK)" $(RUN_ARGS); fi

clean:
	rm -rf -- $(BUILD)

help:
	@echo "quartet: RLHF over MPI model groups (C++17, LibTorch, MPI, parallel HDF5)"
	@echo
	@echo "  make            build $(BUILD)/quartet and the tests (runs deps first)"
	@echo "  make test       deps + build + ctest (-j$(CTEST_JOBS), per-test timeouts from CMake)"
	@echo "  make run        deps + build + the pipeline demo (cmake/pipeline.sh, runs/pipeline/)"
	@echo "  make run DECK=inputs/demo.deck   deps + build + mpirun -np NP $(BUILD)/quartet $(COMMAND) DECK"
	@echo "  make deps       check/install system packages (Debian/Ubuntu), locate LibTorch"
	@echo "  make clean      remove $(BUILD)/ (the cached venv stays)"
	@echo "  make help       this text"
	@echo
	@echo "LibTorch, first match wins:"
	@echo "  Torch_DIR=... or CMAKE_PREFIX_PATH=...  (environment or make command line), used as is"
	@echo "  an active virtualenv/conda env whose python has torch"
	@echo "  the pinned venv (torch $(TORCH_VERSION), transformers $(TRANSFORMERS_VERSION)), created on first use:"
	@echo "    $(VENV)"
	@echo
	@echo "Variables: JOBS=N (compile jobs)  CTEST_JOBS=N  CTEST_ARGS='-R deck'  CMAKE_ARGS='-D...'"
	@echo "           DECK=inputs/demo.deck COMMAND=$(COMMAND) RUN_ARGS='--set section.key=value' RESUME=1"
	@echo "           NP=$(or $(NP),N) (default: quartet plan DECK --ranks-needed; 4 where the deck fixes no number)"
	@echo "           SKIP_SYSTEM_DEPS=1"
	@echo "           QUARTET_PYTHON=/path/to/python (parity tests)  BUILD=$(BUILD)"
