# quartet — the everyday entry points.
#
#   make          build build/quartet and the tests (runs `make deps` first)
#   make test     deps, build, then every test through ctest (MPI tests launch mpirun themselves)
#   make run      deps, build, then the CPU demo: PPO on tiny models learning to sort digits
#   make deps     check (and on Debian/Ubuntu install) what the build needs; find LibTorch
#   make clean    remove build/
#   make help     this summary, with the variables you can set
#
# The logic of `deps` and of configure-and-build lives in the two shell scripts defined below
# (define ... endef), run with bash. The top level of the repository is fixed, so they live here
# rather than in a scripts/ folder.

SHELL := /bin/bash
.DEFAULT_GOAL := build

# ---- Pins: the Python environment that provides LibTorch (and transformers for parity tests) ---
TORCH_VERSION        := 2.11.0
TRANSFORMERS_VERSION := 5.17.0
PY_PACKAGES := torch==$(TORCH_VERSION) transformers==$(TRANSFORMERS_VERSION) \
               safetensors numpy h5py matplotlib

# ---- Where things go ------------------------------------------------------------------------------
BUILD := build
# The pinned venv lives outside the clone, shared by every clone of the same pins.
VENV  := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/quartet/venv-torch$(TORCH_VERSION)-transformers$(TRANSFORMERS_VERSION)
PYTHON3 := python3

# ---- Knobs, set on the command line (make test CTEST_JOBS=4); := so that a stray environment
# variable of the same name (conda sets CMAKE_ARGS, for one) does not leak in ------------------
JOBS       :=# parallel compile jobs (empty: ninja's default)
CTEST_JOBS := 2
CTEST_ARGS :=# extra ctest arguments, e.g. -R deck
CMAKE_ARGS :=# extra cmake options (-DQUARTET_WERROR=ON); kept in the CMake cache
DECK       := inputs/demo.deck
COMMAND    := train# the quartet command make run runs (selfcheck with DECK=inputs/selfcheck.deck)
# Ranks for make run: the sum of the deck's [placement] counts (disjoint mode), else 4.
NP          = $(or $(shell awk '$(deck_ranks_awk)' $(DECK) 2>/dev/null),4)
RUN_ARGS   :=# extra quartet arguments for make run, e.g. --set dist.watchdog_timeout=30
SKIP_SYSTEM_DEPS ?=# 1 (environment or command line): skip the system package check

deck_ranks_awk := { sub(/\#.*/, ""); gsub(/[[:space:]]/, "") } \
  /^\[/ { section = $$0; next } \
  section == "[placement]" && /^(actor|critic|reference|reward)=[0-9]+$$/ { n += substr($$0, index($$0, "=") + 1) } \
  section == "[placement]" && $$0 == "mode=colocated" { colocated = 1 } \
  END { if (n > 0 && !colocated) print n }

# Debian/Ubuntu packages the build and the tests need.
SYSTEM_PACKAGES := build-essential cmake ninja-build pkg-config libopenmpi-dev openmpi-bin \
                   libhdf5-openmpi-dev hdf5-tools libboost-program-options-dev libgtest-dev \
                   nlohmann-json3-dev libpcre2-dev libicu-dev zlib1g-dev libxxhash-dev python3-venv python3-dev \
                   ccache

# What the scripts read from the environment. Torch_DIR, CMAKE_PREFIX_PATH and QUARTET_PYTHON
# come from your environment or the make command line, if you set them.
export BUILD VENV PYTHON3 PY_PACKAGES SYSTEM_PACKAGES SKIP_SYSTEM_DEPS JOBS CMAKE_ARGS
export Torch_DIR CMAKE_PREFIX_PATH QUARTET_PYTHON

# -----------------------------------------------------------------------------------------------
# deps: system packages, then LibTorch. Writes $(BUILD)/deps.env (the CMake arguments that
# locate LibTorch, and the Python for parity tests) for the build step to read.
# -----------------------------------------------------------------------------------------------
define deps_script
set -euo pipefail
say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: %s\n' "$*" >&2; exit 1; }

# 1. System packages. Debian/Ubuntu: ask dpkg, install what is missing with apt-get (as root,
#    or through passwordless sudo). Elsewhere: probe the main commands and name what is missing.
check_system() {
  [ -z "$SKIP_SYSTEM_DEPS" ] || return 0
  if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
    local installed missing=() p
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $SYSTEM_PACKAGES 2>/dev/null \
                | awk '$2 == "ii" { print $1 }' || true)
    for p in $SYSTEM_PACKAGES; do
      grep -qx "$p" <<<"$installed" || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo="sudo -n"
      else
        die "missing Debian packages: ${missing[*]}
  Install them, then run make again:
    sudo apt-get install ${missing[*]}
  (or, with everything installed another way: make SKIP_SYSTEM_DEPS=1 ...)"
      fi
    fi
    say "installing ${missing[*]}"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  else
    local missing=() c
    for c in cmake ninja mpicxx mpirun h5pcc python3; do
      command -v "$c" >/dev/null || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    die "not Debian/Ubuntu (no dpkg-query/apt-get), and these commands are missing: ${missing[*]}
  Install your system's equivalents of the Debian packages:
    $SYSTEM_PACKAGES
  (CMake >= 3.25, Ninja, Open MPI, HDF5 built with MPI (h5pcc), Boost.ProgramOptions,
  nlohmann-json, GoogleTest, Python 3 with venv), then run make again."
  fi
}

# The CMake prefix of the torch package a Python would import, without importing it (importing
# torch takes seconds; this keeps a no-change `make test` quick). Empty if there is none.
torch_prefix_of() {
  local prefix
  prefix=$("$1" -c 'import importlib.util, os
s = importlib.util.find_spec("torch")
if s and s.submodule_search_locations:
    print(os.path.join(list(s.submodule_search_locations)[0], "share", "cmake"))' 2>/dev/null) || return 0
  [ -n "$prefix" ] && [ -f "$prefix/Torch/TorchConfig.cmake" ] && printf '%s' "$prefix"
  return 0
}

# The pinned venv: complete when its stamp holds exactly the pins. Without the stamp (new,
# interrupted, or other pins) pip runs again in it: it fetches only what is missing.
ensure_venv() {
  local stamp="$VENV/.quartet-installed"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$PY_PACKAGES" ] && return 0
  say "setting up $VENV"
  say "  pip install $PY_PACKAGES   (first time: several GB of wheels)"
  if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    command -v "$PYTHON3" >/dev/null || die "no $PYTHON3 to create the venv with"
    rm -rf -- "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON3" -m venv "$VENV" || die "'$PYTHON3 -m venv' failed (Debian: python3-venv)"
  fi
  "$VENV/bin/python" -m pip install --disable-pip-version-check $PY_PACKAGES \
    || die "pip install failed; fix the cause and run make deps again (it resumes)"
  printf '%s\n' "$PY_PACKAGES" > "$stamp"
}

# 2. LibTorch, first match wins:
#    a) Torch_DIR and/or CMAKE_PREFIX_PATH you set: passed to CMake as they are;
#    b) an active virtualenv or conda env (VIRTUAL_ENV, CONDA_PREFIX) whose Python has torch;
#    c) the pinned venv in the cache directory, created on first use.
find_torch() {
  torch_args=() torch_from="" python=""
  local env p prefix
  for env in "${VIRTUAL_ENV:-}" "${CONDA_PREFIX:-}"; do   # the active env, for (a) and (b)
    [ -n "$env" ] && [ -x "$env/bin/python" ] || continue
    prefix=$(torch_prefix_of "$env/bin/python")
    [ -n "$prefix" ] && { python="$env/bin/python" p="$prefix"; break; }
  done
  if [ -n "${Torch_DIR:-}" ] || [ -n "${CMAKE_PREFIX_PATH:-}" ]; then
    local given=()
    [ -z "${Torch_DIR:-}" ] || given+=("Torch_DIR=$Torch_DIR")
    [ -z "${CMAKE_PREFIX_PATH:-}" ] || given+=("CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH")
    for p in "${given[@]}"; do torch_args+=("-D$p"); done
    torch_from="your ${given[*]}"
    # The Python for parity tests: the active env's, else the pinned venv if it is complete.
    if [ -z "$python" ] && [ -f "$VENV/.quartet-installed" ]; then python="$VENV/bin/python"; fi
  elif [ -n "$python" ]; then
    torch_args=("-DCMAKE_PREFIX_PATH=$p")
    torch_from="the active environment, $p"
  else
    ensure_venv
    python="$VENV/bin/python"
    p=$(torch_prefix_of "$python")
    [ -n "$p" ] || die "torch is not importable from $python; remove $VENV/.quartet-installed and run make deps again"
    torch_args=("-DCMAKE_PREFIX_PATH=$p")
    torch_from="$VENV"
  fi
  [ -z "${QUARTET_PYTHON:-}" ] || python="$QUARTET_PYTHON"
}

check_system
find_torch
mkdir -p "$BUILD"
{ declare -p torch_args; printf 'quartet_python=%q\n' "$python"; } > "$BUILD/deps.env.tmp"
mv -f "$BUILD/deps.env.tmp" "$BUILD/deps.env"
say "all present (torch from $torch_from)"
endef

# -----------------------------------------------------------------------------------------------
# build: configure only when needed, then let ninja do the rest.
#   - no build.ninja yet                       -> configure
#   - LibTorch location or Python changed      -> configure from scratch (cmake --fresh), since
#                                                 CMake caches where it found Torch
#   - CMAKE_ARGS differ from the last ones     -> configure (the cache keeps earlier options)
# -----------------------------------------------------------------------------------------------
define build_script
set -euo pipefail
source "$BUILD/deps.env"
# --no-warn-unused-cli: QUARTET_PYTHON is passed before CMakeLists.txt uses it.
args=(-S . -B "$BUILD" -G Ninja --no-warn-unused-cli "${torch_args[@]}")
[ -z "$quartet_python" ] || args+=("-DQUARTET_PYTHON=$quartet_python")
read -r -a extra <<<"$CMAKE_ARGS"
key=$(printf '%q ' "${args[@]}")
extra_key=$(printf '%q ' "${extra[@]}")
stamp="$BUILD/.configured-with" extra_stamp="$BUILD/.configured-extra"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake "${args[@]}" "${extra[@]}"
elif [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$key" ]; then
  echo "build: LibTorch or Python changed since the last configure: configuring from scratch"
  cmake --fresh "${args[@]}" "${extra[@]}"
elif [ ! -f "$stamp" ] || [ "$(cat "$extra_stamp" 2>/dev/null)" != "$extra_key" ]; then
  cmake "${args[@]}" "${extra[@]}"
fi
printf '%s' "$key" > "$stamp"
printf '%s' "$extra_key" > "$extra_stamp"
cmake --build "$BUILD" ${JOBS:+-j "$JOBS"}
endef

# $(value ...) hands the scripts to bash verbatim: no make expansion of their $ signs.
export QUARTET_DEPS_SCRIPT  = $(value deps_script)
export QUARTET_BUILD_SCRIPT = $(value build_script)

.PHONY: all build deps test run clean help

all: build

deps:
	@bash -c "$$QUARTET_DEPS_SCRIPT"

build: deps
	@bash -c "$$QUARTET_BUILD_SCRIPT"

# ctest honours each test's TIMEOUT property from CMake; MPI tests start mpirun themselves.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(CTEST_JOBS) $(CTEST_ARGS)

# Open MPI refuses to run as root unless told; one OpenMP thread per rank on a small machine.
run: build
	@if [ "$$(id -u)" -eq 0 ]; then \
	  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi; \
	export OMP_NUM_THREADS=1; \
	if [ "$(COMMAND) $(DECK)" = "train inputs/demo.deck" ] && [ -z "$(RESUME)" ]; then \
	  echo "+ rm -rf runs/demo   # the demo starts afresh; make run RESUME=1 continues the last one"; \
	  rm -rf runs/demo; fi; \
	echo "+ mpirun -np $(NP) --oversubscribe --bind-to none $(BUILD)/quartet $(COMMAND) $(DECK) $(RUN_ARGS)"; \
	mpirun -np $(NP) --oversubscribe --bind-to none $(BUILD)/quartet $(COMMAND) $(DECK) $(RUN_ARGS)

clean:
	rm -rf -- $(BUILD)

help:
	@echo "quartet: RLHF over MPI model groups (C++17, LibTorch, MPI, parallel HDF5)"
	@echo
	@echo "  make            build $(BUILD)/quartet and the tests (runs deps first)"
	@echo "  make test       deps + build + ctest (-j$(CTEST_JOBS), per-test timeouts from CMake)"
	@echo "  make run        deps + build + mpirun -np $(NP) $(BUILD)/quartet $(COMMAND) $(DECK)"
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
	@echo "           DECK=$(DECK) NP=$(NP) (default: the ranks the deck places)"
	@echo "           RUN_ARGS='--set section.key=value'  SKIP_SYSTEM_DEPS=1"
	@echo "           QUARTET_PYTHON=/path/to/python (parity tests)  BUILD=$(BUILD)"
