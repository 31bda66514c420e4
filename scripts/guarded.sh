#!/usr/bin/env bash
# guarded.sh MINUTES COMMAND...: COMMAND under an outer clock, so a run that cannot end (a test
# stuck where pytest-timeout cannot reach it, a stalled pytest-xdist) is stopped and reported
# instead of running out CI's time. GNU timeout puts COMMAND in a process group of its own and
# ends the whole group (xdist workers, Dask workers, brokers a test started): TERM at MINUTES,
# KILL 30 s later.
set -uo pipefail
minutes=$1
shift
timeout --kill-after=30 "${minutes}m" "$@"
status=$?
if ((status == 124 || status == 137)); then
    echo "guarded.sh: '$*' still running after ${minutes} min: stopped (a test running" \
        "9 min has its stack printed above, after 'Timeout')" >&2
fi
exit "$status"
