#!/usr/bin/env bash
# make deps: the system packages, then LibTorch. Writes $BUILD/deps.env (the CMake arguments that
# locate LibTorch, and the Python for parity tests) for cmake/build.sh to read, and prints one
# line when all is there. The Makefile sets the variables below (its pins and package list).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."   # the repository root: BUILD is relative to it
: "${BUILD:?}" "${VENV:?}" "${PYTHON3:?}" "${PY_PACKAGES:?}" "${SYSTEM_PACKAGES:?}"

say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: %s\n' "$*" >&2; exit 1; }

read -r -a system_packages <<<"$SYSTEM_PACKAGES"
read -r -a py_packages <<<"$PY_PACKAGES"

# 1. System packages. Debian/Ubuntu: ask dpkg, install what is missing with apt-get (as root,
#    or through passwordless sudo). Elsewhere: probe the main commands and name what is missing.
check_system() {
  [ -z "${SKIP_SYSTEM_DEPS:-}" ] || return 0
  if command -v dpkg-query >/dev/null && command -v apt-get >/dev/null; then
    check_debian
  else
    check_commands
  fi
}

check_debian() {
  local installed missing=() p
  # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${system_packages[@]}" 2>/dev/null \
              | awk '$2 == "ii" { print $1 }' || true)
  for p in "${system_packages[@]}"; do
    grep -qx "$p" <<<"$installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      die "missing Debian packages: ${missing[*]}
  Install them, then run make again:
    sudo apt-get install ${missing[*]}
  (or, with everything installed another way: make SKIP_SYSTEM_DEPS=1 ...)"
    fi
  fi
  say "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

check_commands() {
  local missing=() c
  for c in cmake ninja mpicxx mpirun h5pcc python3 shellcheck; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  die "not Debian/Ubuntu (no dpkg-query/apt-get), and these commands are missing: ${missing[*]}
  Install your system's equivalents of the Debian packages:
    $SYSTEM_PACKAGES
  (CMake >= 3.25, Ninja, Open MPI, HDF5 built with MPI (h5pcc), Boost.ProgramOptions,
  nlohmann-json, PCRE2, ICU, xxHash, OpenSSL's libcrypto, libcurl, GoogleTest, Python 3 with venv,
  ShellCheck), then run make again."
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
  "$VENV/bin/python" -m pip install --disable-pip-version-check "${py_packages[@]}" \
    || die "pip install failed; fix the cause and run make deps again (it resumes)"
  printf '%s\n' "$PY_PACKAGES" > "$stamp"
}

# 2. LibTorch, first match wins:
#    a) Torch_DIR and/or CMAKE_PREFIX_PATH you set: passed to CMake as they are;
#    b) an active virtualenv or conda env (VIRTUAL_ENV, CONDA_PREFIX) whose Python has torch;
#    c) the pinned venv in the cache directory, created on first use.
# Sets torch_args (CMake arguments), torch_from (for the summary line) and python.
find_torch() {
  torch_args=() torch_from="" python=""
  local env p="" prefix
  for env in "${VIRTUAL_ENV:-}" "${CONDA_PREFIX:-}"; do   # the active env, for (a) and (b)
    { [ -n "$env" ] && [ -x "$env/bin/python" ]; } || continue
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
