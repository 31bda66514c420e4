#!/usr/bin/with-contenv bashio
# shellcheck shell=bash
# The add-on's entry point: the Supervisor's options (/data/options.json) and the MQTT service of
# the Mosquitto add-on (when there is one) become /data/config.toml; then the daemon runs with it.
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

exec /opt/voxmeter/.venv/bin/voxmeter run --config /data/config.toml
