"""``voxmeter relay``: a small process that imports nothing that measures, reads its few keys of
config.toml with one-line errors, and replaces the socket a killed relay left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.errors import ConfigError
from monitor.relay.process import load_relay_config
from tests.realparts.mosquitto import free_port

REPO = Path(__file__).resolve().parents[2]
MEASURING = ("numpy", "onnxruntime", "torch", "pocketsphinx", "soxr", "scipy", "speechbrain")

SERVE_AND_LIST_MODULES = """
import asyncio, json, sys
import monitor.cli  # the entry point `voxmeter relay` goes through
from monitor.relay.process import RelayProcess, load_relay_config

config = load_relay_config(None, sys.argv[1:])

async def main():
    relay = RelayProcess(config)
    running = asyncio.get_running_loop().create_task(relay.run())
    await relay.serving.wait()
    relay.stop()
    await running

asyncio.run(main())
print(json.dumps(sorted(sys.modules)))
"""


def overrides(tmp_path: Path, *, zeroconf: bool = False) -> list[str]:
    port = free_port()
    return [
        f"daemon.source=wyoming-proxy://127.0.0.1:{port}?upstream=tcp://127.0.0.1:1",
        f"relay.socket={tmp_path / 'relay.sock'}",
        f"wyoming.zeroconf={'true' if zeroconf else 'false'}",
    ]


@pytest.mark.parametrize("zeroconf", [False, True])
def test_the_relay_process_imports_nothing_that_measures(tmp_path: Path, zeroconf: bool) -> None:
    """Serving (and announcing on zeroconf), the relay has not imported numpy, ONNX Runtime,
    torch, pocketsphinx or the resampler: a crash or OOM kill of those is not its."""
    result = subprocess.run(
        [sys.executable, "-c", SERVE_AND_LIST_MODULES, *overrides(tmp_path, zeroconf=zeroconf)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.splitlines()[-1])
    assert "monitor.wyoming.relay" in modules and "monitor.wyoming.channel" in modules
    assert [m for m in modules if m.split(".")[0] in MEASURING] == []


def test_the_relay_process_loads_the_anonymiser_only_when_protecting(tmp_path: Path) -> None:
    """``[protect] mode`` other than off: numpy and scipy (the anonymiser's) are imported, and
    still nothing else that measures; off (the test above): neither."""
    result = subprocess.run(
        [
            sys.executable, "-c", SERVE_AND_LIST_MODULES, *overrides(tmp_path),
            "protect.mode=exceeded", "protect.alpha=0.5,0.9",
        ],
        capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.splitlines()[-1])
    protecting = {"numpy", "scipy", "monitor.protect.mcadams", "monitor.protect.relay_process"}
    assert protecting <= set(modules)
    loaded = {m.split(".")[0] for m in modules if m.split(".")[0] in MEASURING}
    assert loaded == {"numpy", "scipy"}


def test_voxmeter_relay_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for arguments, key in [
        ([], "relay.socket"),
        (["--set", f"relay.socket={tmp_path / 's'}"], "daemon.source"),
        (
            ["--set", f"relay.socket={tmp_path / 's'}", "--set", "daemon.source=mic"],
            "daemon.source",
        ),
        *[
            (
                [*(a for o in [*overrides(tmp_path), *bad] for a in ("--set", o))],
                bad[-1].partition("=")[0],
            )
            for bad in (
                ["protect.mode=sometimes"],
                ["protect.method=voicemod"],
                ["protect.mode=always", "protect.alpha=1.5"],
                ["protect.mode=exceeded", "protect.alpha=0.5,0.9,1"],
            )
        ],
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "relay", *arguments],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"voxmeter: error: config key '{key}'"), line


def test_relay_config_reads_its_keys_of_the_daemons_file(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[daemon]\nsource = "wyoming-proxy://0.0.0.0:10555?upstream=tcp://whisper:10300"\n'
        '[relay]\nsocket = "/run/voxmeter/relay.sock"\nchannel_bytes = 65536\n'
        '[wyoming]\nzeroconf = false\n[budget]\nbits = 3.0\n[logging]\nformat = "json"\n'
    )
    loaded = load_relay_config(config)
    (proxy,) = loaded.proxies
    assert (proxy.port, proxy.upstream_host, proxy.upstream_port) == (10555, "whisper", 10300)
    assert (loaded.socket, loaded.channel_bytes) == (Path("/run/voxmeter/relay.sock"), 65536)
    assert (loaded.zeroconf, loaded.format) == (False, "json")
    named = load_relay_config(
        config,
        [
            'audio.sources=["kitchen=wyoming-proxy://0.0.0.0:10301?upstream=tcp://w:10300", '
            '"mic", "hall=wyoming-proxy://0.0.0.0:10401?upstream=tcp://ww:10400"]'
        ],
    )  # several sources: the relay serves the proxies, known by their specs without the names
    assert [str(p) for p in named.proxies] == [
        "wyoming-proxy://0.0.0.0:10301?upstream=tcp://w:10300",
        "wyoming-proxy://0.0.0.0:10401?upstream=tcp://ww:10400",
    ]
    with pytest.raises(ConfigError, match=r"relay\.channel_bytes"):
        load_relay_config(config, ["relay.channel_bytes=true"])
    with pytest.raises(ConfigError, match=r"wyoming\.zeroconf"):
        load_relay_config(config, ["wyoming.zeroconf=1"])


def test_a_socket_left_by_a_killed_relay_is_replaced_and_a_live_one_is_refused(
    tmp_path: Path,
) -> None:
    import asyncio
    import socket

    from monitor.errors import AudioDeviceError
    from monitor.wyoming.channel import ChannelServer

    path = tmp_path / "relay.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # bound, never listening: what a SIGKILLed relay leaves
    stale.close()

    async def main() -> None:
        first = ChannelServer(path)
        await first.start()
        try:
            with pytest.raises(AudioDeviceError, match="another relay is listening"):
                await ChannelServer(path).start()
        finally:
            await first.stop()

    asyncio.run(main())
