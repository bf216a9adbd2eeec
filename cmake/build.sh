#!/usr/bin/env bash
# make build: configure only when needed, then let ninja do the rest.
#   - no build.ninja yet                       -> configure
#   - LibTorch location or Python changed      -> configure from scratch (cmake --fresh), since
#                                                 CMake caches where it found Torch
#   - CMAKE_ARGS differ from the last ones     -> configure (the cache keeps earlier options)
# Reads $BUILD/deps.env, written by cmake/deps.sh; JOBS and CMAKE_ARGS come from the Makefile.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."   # the repository root: BUILD is relative to it
: "${BUILD:?}"

torch_args=() quartet_python=""
# shellcheck source=/dev/null  # written by cmake/deps.sh: torch_args and quartet_python
source "$BUILD/deps.env"
# --no-warn-unused-cli: QUARTET_PYTHON is passed before CMakeLists.txt uses it.
args=(-S . -B "$BUILD" -G Ninja --no-warn-unused-cli "${torch_args[@]}")
[ -z "$quartet_python" ] || args+=("-DQUARTET_PYTHON=$quartet_python")
read -r -a extra <<<"${CMAKE_ARGS:-}"
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
