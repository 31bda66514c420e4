#!/usr/bin/env bash
# Install the Debian packages voxmeter's real parts need: the MQTT broker, Prometheus with
# promtool, PulseAudio for the virtual microphone, PortAudio for sounddevice, espeak-ng and sox
# for the demo's own speech, Chromium and its driver for the Home Assistant browser test. Skips
# apt entirely when everything is already there.
set -euo pipefail

packages=(mosquitto mosquitto-clients prometheus pulseaudio pulseaudio-utils libasound2-plugins
          alsa-utils libportaudio2 espeak-ng sox sqlite3 chromium chromium-driver)
commands=(mosquitto mosquitto_pub prometheus promtool pulseaudio pactl paplay espeak-ng sox sqlite3
          chromium chromedriver)

missing=0
for c in "${commands[@]}"; do command -v "$c" >/dev/null 2>&1 || missing=1; done
ldconfig -p 2>/dev/null | grep -q libportaudio.so.2 || missing=1
[ "$missing" = 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
        echo "install-system: need root (or sudo) to apt-get install: ${packages[*]}" >&2
        exit 1
    fi
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
echo "install-system: installed ${packages[*]}"
