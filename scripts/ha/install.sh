#!/usr/bin/env bash
# The real Home Assistant the tests drive (tests/realparts/homeassistant.py), in its own venv.
#
# Home Assistant 2025.4 needs Python >= 3.13; ours is 3.11, so it gets a venv of its own (.venv-ha,
# git-ignored) made with the newest Python >= 3.13 found on this machine (VOXMETER_HA_PYTHON, then
# python3.13/python3.14 on PATH, then pyenv's versions). The requirements of every integration the
# tests load are installed here, at set-up time: the tests run hass with --skip-pip, so nothing is
# downloaded at run time. A stamp (version + this script + the integration list) makes a second run
# a no-op. With no suitable Python, it writes the reason to .venv-ha/UNAVAILABLE and exits 0: the
# tests then skip with that reason (pytest -ra prints it), never pass silently.
set -euo pipefail
cd "$(dirname "$0")/../.."

HA_VERSION=2025.4.4
VENV=${VOXMETER_HA_VENV:-.venv-ha}
INTEGRATIONS="mqtt wyoming assist_pipeline stt frontend recorder history logbook"
STAMP="$VENV/.installed-$HA_VERSION-$(cat scripts/ha/install.sh scripts/ha/requirements.py | cksum | cut -d' ' -f1)"

if [[ -f "$STAMP" ]]; then
    exit 0
fi

newest_python() {
    # Prints the path of the newest interpreter >= 3.13 among the candidates, or nothing.
    local candidates=()
    [[ -n "${VOXMETER_HA_PYTHON:-}" ]] && candidates+=("$VOXMETER_HA_PYTHON")
    for name in python3.14 python3.13 python3; do
        command -v "$name" >/dev/null 2>&1 && candidates+=("$(command -v "$name")")
    done
    local root=${PYENV_ROOT:-$HOME/.pyenv}
    for dir in "$root"/versions/*/bin/python3; do
        [[ -x "$dir" ]] && candidates+=("$dir")
    done
    local best="" best_version=0
    for python in "${candidates[@]}"; do
        local version
        version=$("$python" -c 'import sys; print(sys.version_info[0] * 100 + sys.version_info[1]) if sys.version_info >= (3, 13) else print(0)' 2>/dev/null || echo 0)
        # a pyenv shim answers for whatever version is selected: take it only if venv works
        if (( version > best_version )) && "$python" -c 'import venv, ensurepip' 2>/dev/null; then
            best=$python
            best_version=$version
        fi
    done
    echo "$best"
}

PYTHON_HA=$(newest_python)
rm -f "$VENV/UNAVAILABLE"
if [[ -z "$PYTHON_HA" ]]; then
    mkdir -p "$VENV"
    reason="no Python >= 3.13 on this machine (Home Assistant $HA_VERSION needs it; looked at \$VOXMETER_HA_PYTHON, python3.13/3.14 on PATH and pyenv versions)"
    echo "$reason" > "$VENV/UNAVAILABLE"
    echo "make ha: $reason: the real-Home-Assistant tests will be skipped" >&2
    exit 0
fi

started=$(date +%s)
echo "make ha: Home Assistant $HA_VERSION into $VENV with $PYTHON_HA ($("$PYTHON_HA" -V))"
# an earlier venv is reused (pip only adds what is missing): installing takes minutes
[[ -x "$VENV/bin/python" ]] || "$PYTHON_HA" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "homeassistant==$HA_VERSION"
constraints=$("$VENV/bin/python" -c 'import homeassistant, pathlib; print(pathlib.Path(homeassistant.__file__).parent / "package_constraints.txt")')
# shellcheck disable=SC2046  # one requirement per word
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$constraints" \
    $("$VENV/bin/python" scripts/ha/requirements.py $INTEGRATIONS)
touch "$STAMP"
echo "make ha: installed in $(( $(date +%s) - started )) s"
