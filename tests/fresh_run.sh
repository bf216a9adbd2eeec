#!/bin/sh
# fresh_run.sh DIR COMMAND...: removes DIR, then runs COMMAND. `quartet train` resumes from the
# checkpoints it finds in its run.out, so a test that wants a run from the start (and can be run
# again by hand) clears its run directory first.
set -e
dir=$1
shift
rm -rf "$dir"
exec "$@"
