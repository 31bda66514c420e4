#!/usr/bin/with-contenv bashio
# shellcheck shell=bash
# The add-on's entry point: the Supervisor's options (/data/options.json) and the MQTT service of
# the Mosquitto add-on (when there is one) become /data/config.toml; then two processes run with
# it, each restarted when it ends (docs/operations.md section 11): the relay (the Wyoming proxy,
# small, no numpy) and the measuring process (voxmeter run), which may be killed, crash or run
# out of memory without Home Assistant losing its speech-to-text.
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

python3 /opt/voxmeter/addon/options_to_config.py /data/options.json /data/config.toml "${mqtt_args[@]}"

# Offer the proxy to Home Assistant's Wyoming integration (config.yaml's `discovery: [wyoming]`):
# it asks the user to confirm, then describes the proxy, which is listening by then.
bashio::discovery "wyoming" "$(bashio::var.json uri "tcp://$(hostname):10555")" > /dev/null \
    || bashio::log.warning "could not offer the proxy to Home Assistant: add it by hand (port 10555)"

venv=/opt/voxmeter/.venv/bin

# Runs "$@" again each time it ends: after ${2} s, or ${3} s after exit 2 (a user error no restart
# fixes at once), the ${1} named in the log. SIGTERM goes on to the running process, whose own
# clean stop (the ledger flushed, "offline" published) the loop waits for.
keep_running() {
    local name="$1" delay="$2" after_error="$3"
    shift 3
    local child=0 status
    trap 'kill -TERM "${child}" 2>/dev/null; wait "${child}"; exit 0' TERM INT
    while true; do
        "$@" &
        child=$!
        status=0
        wait "${child}" || status=$?
        if [ "${status}" -eq 2 ]; then
            bashio::log.error "the ${name} cannot start (exit 2, the line above says why); retrying in ${after_error} s"
            sleep "${after_error}"
        else
            bashio::log.warning "the ${name} ended (status ${status}): restarting it in ${delay} s"
            sleep "${delay}"
        fi
    done
}

# The relay comes back 0.2 s after it ends, whatever ended it; the measuring process 1 s after a
# SIGKILL, a crash or the OOM killer, while the relay goes on and counts what it relays unmeasured.
keep_running relay 0.2 10 "${venv}/python" -m monitor.relay.process --config /data/config.toml &
relay=$!
keep_running "measuring process" 1 60 "${venv}/voxmeter" run --config /data/config.toml &
measuring=$!

# The add-on stops: both loops stop their process and wait for its clean exit.
trap 'kill -TERM "${relay}" "${measuring}"; wait "${relay}" "${measuring}"; exit 0' TERM INT
wait
