#!/usr/bin/with-contenv bashio
# shellcheck shell=bash
# The add-on's entry point: the Supervisor's options (/data/options.json) and the MQTT service of
# the Mosquitto add-on (when there is one) become /data/config.toml; then two processes run with
# it (docs/operations.md, "Two processes: a relay that survives the measuring side"): the relay (the
# Wyoming proxy, small, no numpy), restarted whenever it ends, and the measuring process
# (voxmeter run), restarted after a crash or the OOM killer but never for a problem the user must
# fix (one line in the log says which option), so speech-to-text goes on either way. With MQTT
# discovery, voxmeter run itself shows that line on the device's Problem entity and waits to be
# stopped (then exits 2); without it, it exits 2 at once and the loop below waits instead.
set -euo pipefail

mqtt_args=()
if bashio::services.available "mqtt"; then
    mqtt_args=(
        --mqtt-host "$(bashio::services mqtt 'host')"
        --mqtt-port "$(bashio::services mqtt 'port')"
        --mqtt-username "$(bashio::services mqtt 'username')"
        --mqtt-password "$(bashio::services mqtt 'password')"
        --mqtt-ssl "$(bashio::services mqtt 'ssl')"
    )
else
    bashio::log.warning "no MQTT broker (install the Mosquitto add-on): no entities, alerts only in the log"
fi

# The database's folder under /share (the Samba or File editor add-ons show it); 0700, as the
# database holds voice profiles.
database="$(bashio::config 'database')"
install -d -m 0700 "$(dirname "${database}")"

# This add-on's page in Home Assistant is every device's Visit link; metrics are served only when
# the user published their port in the Network tab (empty or null: not published).
python3 /opt/voxmeter/addon/options_to_config.py /data/options.json /data/config.toml \
    "${mqtt_args[@]}" \
    --addon-slug "$(bashio::addon.slug)" \
    --metrics-host-port "$(bashio::addon.port '39217/tcp' || true)"

# Offer the proxy to Home Assistant's Wyoming integration (config.yaml's `discovery: [wyoming]`):
# it asks the user to confirm, then describes the proxy, which is listening by then.
bashio::discovery "wyoming" "$(bashio::var.json uri "tcp://$(hostname):10555")" > /dev/null \
    || bashio::log.warning "could not offer the proxy to Home Assistant: add it by hand (port 10555)"

venv=/opt/voxmeter/.venv/bin

# Runs "$@" again each time it ends, after ${2} s, the ${1} named in the log; after exit 2 (a
# problem the user fixes in the options: no restart can; a process that showed it in Home
# Assistant exits 2 only when stopped) it waits for the add-on's restart instead. SIGTERM goes on to the running process, whose own clean stop (the ledger flushed,
# "offline" published) the loop waits for.
keep_running() {
    local name="$1" delay="$2"
    shift 2
    local child=0 status
    trap 'kill -TERM "${child}" 2>/dev/null; wait "${child}"; exit 0' TERM INT
    while true; do
        "$@" &
        child=$!
        status=0
        wait "${child}" || status=$?
        if [ "${status}" -eq 2 ]; then
            bashio::log.error "the ${name} stopped: fix what the line above names in the add-on's Configuration tab, then restart the add-on"
            sleep infinity &
            child=$!
            wait "${child}" || true
            exit 0
        else
            bashio::log.warning "the ${name} ended (status ${status}): restarting it in ${delay} s"
            sleep "${delay}"
        fi
    done
}

# The relay comes back 0.2 s after it ends, whatever ended it; the measuring process 1 s after a
# SIGKILL, a crash or the OOM killer, while the relay goes on and counts what it relays unmeasured.
keep_running relay 0.2 "${venv}/python" -m monitor.relay.process --config /data/config.toml &
relay=$!
keep_running "measuring process" 1 "${venv}/voxmeter" run --config /data/config.toml &
measuring=$!

# The add-on stops: both loops stop their process and wait for its clean exit.
trap 'kill -TERM "${relay}" "${measuring}"; wait "${relay}" "${measuring}"; exit 0' TERM INT
wait
