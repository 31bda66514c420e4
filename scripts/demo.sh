#!/usr/bin/env bash
# make demo: build a demo database, run the live daemon on a demo stream, and watch the
# per-speaker disclosure change in the terminal; stop after DEMO_SECONDS and print a summary.
#
# With ../shared/data/speechocean762 (the team's corpus): ~30 corpus speakers are enrolled with
# a small K plus one household member (a local profile); the stream replays that member's
# held-out speech, then a stranger's (an unknown-N track). Without it (a user's clone): speech is
# made with espeak-ng, eight voices/pitches standing for eight identities.
# The stream goes through a PulseAudio virtual microphone when PulseAudio can run here, and is
# replayed from a file (paced in real time) otherwise. Metrics: http://127.0.0.1:$DEMO_PORT/metrics
#
# Environment: DEMO_SECONDS (75), DEMO_PORT (39217), DEMO_DIR (a new temporary folder),
# DEMO_SPEAKERS (30), DEMO_K (3 utterances per enrolled speaker), VOXMETER_CORPUS.
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$PWD
PY="$REPO/.venv/bin/python"
VOXMETER="$REPO/.venv/bin/voxmeter"
SECONDS_TO_RUN=${DEMO_SECONDS:-75}
PORT=${DEMO_PORT:-39217}
SPEAKERS=${DEMO_SPEAKERS:-30}
K=${DEMO_K:-3}
CORPUS=${VOXMETER_CORPUS:-$REPO/../shared/data/speechocean762}
WORK=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/voxmeter-demo.XXXXXX")}
mkdir -p "$WORK"
DB="$WORK/demo.db"
STREAM="$WORK/stream.wav"
LOG="$WORK/daemon.log"
PIDS=()

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    [ -n "${PA:-}" ] && rm -rf "$PA"
    return 0
}
trap cleanup EXIT

[ -x "$PY" ] || { echo "demo: run 'make demo' (it installs .venv first)" >&2; exit 2; }
rm -f "$DB" "$DB"-wal "$DB"-shm

# ---- 1. demo speakers and the stream --------------------------------------------------------
if [ -f "$CORPUS/speakers.tsv" ]; then
    say "corpus demo: $SPEAKERS speakers from $CORPUS (K = $K), one household member, one stranger"
    "$PY" - "$CORPUS" "$WORK" "$SPEAKERS" <<'EOF'
import csv, sys
from pathlib import Path

import numpy as np
import soundfile as sf

from monitor.audio.file import read_audio

corpus, work, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
rows = list(csv.DictReader(open(corpus / "speakers.tsv"), delimiter="\t"))
adults = [r["speaker"] for r in rows if int(r["age"]) >= 18 and (corpus / r["speaker"]).is_dir()]
member, stranger, others = adults[0], adults[1], adults[2 : 2 + count]
enrol = work / "enrol"
(enrol / "templates").mkdir(parents=True, exist_ok=True)
(enrol / "member" / member).mkdir(parents=True, exist_ok=True)
for speaker in others:  # the database: whole speaker folders (enrol uses the first K)
    link = enrol / "templates" / speaker
    if not link.exists():
        link.symlink_to(corpus / speaker)
files = sorted((corpus / member).glob("*.flac"))
for path in files[:4]:  # the household member enrols with 4 utterances ...
    link = enrol / "member" / member / path.name
    if not link.exists():
        link.symlink_to(path)
gap = np.zeros(8000, dtype=np.float32)
pieces = []
for path in files[4:] + sorted((corpus / stranger).glob("*.flac")) + files[4:]:
    audio, _ = read_audio(path)  # ... and speaks again, then a stranger, then the member again
    pieces += [audio, gap]
sf.write(work / "stream.wav", np.concatenate(pieces), 16000, subtype="PCM_16")
(work / "member").write_text(member)
print(f"household member {member}, stranger {stranger}, {len(others)} other identities")
EOF
    "$VOXMETER" enroll "$WORK/enrol/templates" --db "$DB" --utterances "$K"
    "$VOXMETER" enroll "$WORK/enrol/member" --db "$DB" --utterances 4 --local
    CALIBRATE_ON="$WORK/enrol/templates"
    BUDGET=4.0  # bits; the ceiling is log2 31 = 4.95
else
    say "no corpus at $CORPUS: making 8 synthetic speakers with espeak-ng"
    SYN="$WORK/synthetic"
    mkdir -p "$SYN"
    VOICES=("en-us+m1:35" "en-gb+m3:55" "en-us+f2:70" "en-gb-scotland+f3:60"
            "en-us+m7:25" "en-029+f4:85" "en-gb-x-rp+m2:45" "en-us+f1:50")
    SENTENCES=(
        "The quick brown fox jumps over the lazy dog near the river bank."
        "Please call Stella and ask her to bring these things with her from the store."
        "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack."
        "We also need a small plastic snake and a big toy frog for the kids."
        "She can scoop these things into three red bags, and we will go meet her on Wednesday."
        "When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow."
        "The rainbow is a division of white light into many beautiful colours."
        "These take the shape of a long round arch, with its path high above."
        "There is, according to legend, a boiling pot of gold at one end."
        "People look, but no one ever finds it, and a man who looks for it is a dreamer."
    )
    for i in "${!VOICES[@]}"; do
        voice=${VOICES[$i]%%:*}
        pitch=${VOICES[$i]##*:}
        speaker=$(printf 'synth-%02d' $((i + 1)))
        mkdir -p "$SYN/templates/$speaker"
        for j in "${!SENTENCES[@]}"; do
            espeak-ng -v "$voice" -p "$pitch" -s $((140 + 7 * i)) \
                -w "$SYN/templates/$speaker/$(printf 'u%02d' "$j").wav" "${SENTENCES[$j]}"
        done
    done
    # synth-01 is the household member: templates from 4 sentences, the stream from the rest
    mkdir -p "$SYN/member/synth-01"
    for j in 0 1 2 3; do
        mv "$SYN/templates/synth-01/u0$j.wav" "$SYN/member/synth-01/"
    done
    sox $(ls "$SYN"/templates/synth-01/*.wav) $(ls "$SYN"/templates/synth-05/*.wav) \
        $(ls "$SYN"/templates/synth-01/*.wav) -r 16000 -c 1 -b 16 "$STREAM"
    "$VOXMETER" enroll "$SYN/templates" --db "$DB" --utterances 4 --no-cache
    "$VOXMETER" enroll "$SYN/member" --db "$DB" --utterances 4 --local --no-cache
    echo synth-01 > "$WORK/member"
    CALIBRATE_ON="$SYN/templates"
    BUDGET=2.5  # bits; the ceiling is log2 8 = 3
fi

# ---- 2. calibration --------------------------------------------------------------------------
if [ -f "$REPO/monitor/calibration/shipped/calibration.json" ]; then
    say "calibration: monitor/calibration/shipped/calibration.json (the shipped default)"
else
    say "monitor/calibration/shipped/calibration.json is absent: calibrating on the fly on the demo speakers" \
        "(small and speaker-overlapping: figures are for show only)"
    "$VOXMETER" calibrate "$CALIBRATE_ON" --db "$DB" --out "$WORK/calibration.json" \
        --buckets 3,6,12 --template-seconds rest
fi

# ---- 3. the metrics offline: `voxmeter score` on a score matrix ---------------------------------
say "offline: voxmeter score --matrix on a score matrix (SRD, LID, ZEBRA, baselines)"
"$PY" scripts/demo_score.py || echo "demo: the offline score report failed (continuing with the live demo)"

# ---- 4. the stream: PulseAudio virtual microphone, else file replay --------------------------
SOURCE="file:$STREAM"
if command -v pulseaudio >/dev/null && command -v paplay >/dev/null; then
    PA=$(mktemp -d "${TMPDIR:-/tmp}/vxpa.XXXXXX")  # short: the socket path must fit 108 bytes
    mkdir -p "$PA/home" "$PA/xdg"
    chmod 700 "$PA" "$PA/home" "$PA/xdg"
    HOME=$PA/home XDG_RUNTIME_DIR=$PA/xdg pulseaudio -n --daemonize=no --exit-idle-time=-1 \
        --disallow-exit --use-pid-file=no \
        -L "module-native-protocol-unix auth-anonymous=1 socket=$PA/xdg/native" \
        -L "module-null-sink sink_name=vmic rate=16000 channels=1 format=s16le" \
        >"$WORK/pulseaudio.log" 2>&1 &
    PIDS+=($!)
    export PULSE_SERVER="unix:$PA/xdg/native"
    for _ in $(seq 100); do
        pactl info >/dev/null 2>&1 && break
        sleep 0.1
    done
    if pactl info >/dev/null 2>&1; then
        pactl set-default-source vmic.monitor
        pactl set-default-sink vmic
        # keep-alive: an idle null sink is suspended and loses the start of what is played
        pacat --playback --device=vmic --rate=16000 --channels=1 --format=s16le /dev/zero \
            2>/dev/null &
        PIDS+=($!)
        SOURCE="mic:pulse"
    else
        echo "demo: PulseAudio did not start here (see $WORK/pulseaudio.log): replaying a file"
        unset PULSE_SERVER
    fi
fi

# ---- 5. the daemon ---------------------------------------------------------------------------
say "starting voxmeter run on $SOURCE; metrics on http://127.0.0.1:$PORT/metrics"
SETTINGS=(--set "prometheus.port=$PORT" --set "budget.bits=$BUDGET" --set "budget.warn_fraction=0.6")
if [ -f "$WORK/calibration.json" ]; then
    SETTINGS+=(--set "scorer.calibration=\"$WORK/calibration.json\"")
fi
"$VOXMETER" run --config "$REPO/config.toml" --db "$DB" --source "$SOURCE" --keep-running \
    "${SETTINGS[@]}" >"$LOG" 2>&1 &
DAEMON=$!
PIDS+=("$DAEMON")
# the stream is played only once the capture runs: "started" comes when the models are loaded,
# the microphone opens after it, and a stream played meanwhile loses its first seconds
READY="msg=started"
[ "$SOURCE" = "mic:pulse" ] && READY="capturing from"
for _ in $(seq 600); do  # models load in a few seconds (minutes on a busy machine)
    grep -q "$READY" "$LOG" 2>/dev/null && break
    kill -0 "$DAEMON" 2>/dev/null || { cat "$LOG"; exit 1; }
    sleep 0.5
done
if [ "$SOURCE" = "mic:pulse" ]; then
    grep -q "$READY" "$LOG" || { echo "demo: the capture did not start (see $LOG)" >&2; exit 1; }
    paplay --device=vmic "$STREAM" 2>/dev/null &
    PIDS+=($!)
fi

# ---- 6. watch it live ------------------------------------------------------------------------
say "live view for ${SECONDS_TO_RUN} s (household member $(cat "$WORK/member"), then another voice, then the member again)"
"$VOXMETER" status --db "$DB" --live --interval 1 --seconds "$SECONDS_TO_RUN" \
    --config "$REPO/config.toml" || true

# ---- 7. stop and summarise -------------------------------------------------------------------
echo
say "summary"
if metrics=$("$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "http://127.0.0.1:$PORT/metrics" 2>/dev/null); then
    echo "metrics (combined LID and budget states) at the end:"
    printf '%s\n' "$metrics" \
        | grep -E '^voxmeter_(disclosure_bits\{.*feature="combined".*measure="lid"|budget_state\{.*\} 1|disclosure_ceiling_bits|information_gain_bits|realtime_factor|frames_total)' \
        || true
else
    echo "(metrics endpoint not reachable)"
fi
kill -TERM "$DAEMON" 2>/dev/null || true
wait "$DAEMON" 2>/dev/null || true
grep -E "msg=budget|^[^ ]+: [0-9]+ windows|^stopped" "$LOG" || true
"$VOXMETER" status --db "$DB" --config "$REPO/config.toml"
echo "database, stream and daemon log kept in $WORK"
