#!/usr/bin/env bash
# The unit tests that need no service and no torch, under the newest Python >= 3.13 on this
# machine, in a venv of their own (.venv-313, git-ignored): the check that voxmeter and its pinned
# dependencies work on Debian 13's Python (3.13) as on 3.11.
#
# Every pinned dependency has cp313 wheels, torch too, but torch's on PyPI is the CUDA build
# (several GB with its nvidia-* wheels); the CPU wheel that `make venv` installs for 3.11 is not
# there for 3.13. So this venv has every pinned dependency except torch (and Resemblyzer, which
# needs it), and runs the packages whose tests need neither torch nor a model nor a service
# (TESTS below; the service markers are deselected). The whole suite, models and services
# included, runs under 3.11 (`make test`). wyoming imports audioop, which Python 3.13 removed:
# wyoming 1.10.2 requires audioop-lts there, so pip installs it.
#
# `test.sh --install-only` installs and stops (make test does so before it starts the clock on
# the tests). A stamp (this script + pyproject.toml) makes the install a no-op once done. With no Python
# >= 3.13 on the machine it says so and exits 0 (as the Home Assistant tests skip without one).
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=${VOXMETER_PY313_VENV:-.venv-313}
TESTS="tests/disclosure tests/settings tests/store tests/events tests/ledger tests/scoring
    tests/wyoming tests/exporters tests/relay tests/sources tests/load tests/docs tests/test_*.py"
MARKERS="not slow and not corpus and not parity and not mosquitto and not prometheus
    and not pulseaudio and not homeassistant and not browser"

python313() {
    # The newest interpreter >= 3.13 among VOXMETER_PY313, python3.13/3.14 and pyenv's versions.
    local candidates=() best="" best_version=0 python version
    [[ -n "${VOXMETER_PY313:-}" ]] && candidates+=("$VOXMETER_PY313")
    for name in python3.14 python3.13; do
        command -v "$name" >/dev/null 2>&1 && candidates+=("$(command -v "$name")")
    done
    for python in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3; do
        [[ -x "$python" ]] && candidates+=("$python")
    done
    for python in "${candidates[@]}"; do
        version=$("$python" -c 'import sys; v = sys.version_info; print(v[0] * 100 + v[1] if v >= (3, 13) else 0)' 2>/dev/null || echo 0)
        if ((version > best_version)) && "$python" -c 'import venv, ensurepip' 2>/dev/null; then
            best=$python
            best_version=$version
        fi
    done
    echo "$best"
}

STAMP="$VENV/.installed-$(cat scripts/py313/test.sh pyproject.toml | cksum | cut -d' ' -f1)"
if [[ ! -f "$STAMP" ]]; then
    PYTHON=$(python313)
    if [[ -z "$PYTHON" ]]; then
        echo "py313: no Python >= 3.13 on this machine (python3.13, pyenv or VOXMETER_PY313):" \
            "the Python 3.13 tests did not run" >&2
        exit 0
    fi
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" - "$VENV" <<'PY'
import sys, tomllib
pyproject = tomllib.load(open("pyproject.toml", "rb"))
project, venv = pyproject["project"], sys.argv[1]
pinned = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
with open(f"{venv}/requirements.txt", "w") as out:  # all but torch
    out.writelines(f"{spec}\n" for spec in pinned if not spec.startswith("torch"))
with open(f"{venv}/no-deps.txt", "w") as out:  # as `make venv`, without Resemblyzer (torch)
    out.writelines(f"{spec}\n" for spec in pyproject["tool"]["voxmeter"]["no-deps"]
                   if not spec.startswith("Resemblyzer"))
PY
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$VENV/requirements.txt"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$VENV/no-deps.txt"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
    touch "$STAMP"
fi
if [[ "${1:-}" == "--install-only" ]]; then
    exit 0
fi
# shellcheck disable=SC2086  # TESTS is a list of paths
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider -m "$(echo $MARKERS)" $TESTS "$@"
