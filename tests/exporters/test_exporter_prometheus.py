"""The Prometheus exporter: events → instruments (through the registry), the outbox gauge read
from a real store at scrape time, and the real HTTP(S) server scraped by a real Prometheus."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from monitor.audio.frames import StreamKey
from monitor.errors import ConfigError
from monitor.events.messages import (
    BOUNDS,
    FEATURES,
    MEASURES,
    DaemonStopping,
    SourceCounts,
    TrackExpired,
)
from monitor.exporters.prometheus import PrometheusExporter
from monitor.settings.sections import PrometheusSettings
from monitor.store.database import open_store
from tests.exporters.exporter_events import CEILING_BITS, changed, scored, started, stats


class FakeClock:
    """time.monotonic stand-in: tests move it by hand."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_exporter(
    *, db_path: Path | None = None, clock: FakeClock | None = None, **settings: object
) -> tuple[PrometheusExporter, CollectorRegistry]:
    registry = CollectorRegistry()
    exporter = PrometheusExporter(
        PrometheusSettings(port=0, **settings),  # type: ignore[arg-type]
        db_path=db_path,
        registry=registry,
        monotonic=clock or FakeClock(),
    )
    return exporter, registry


def test_window_sets_every_disclosure_bound_budget_and_state() -> None:
    clock = FakeClock(100.0)
    exporter, registry = make_exporter(clock=clock)
    get = registry.get_sample_value
    exporter.apply(started())
    clock.now = 100.4
    exporter.apply(scored("alias-a", index=2, combined_bits=4.5, state="warning"))

    event = scored("alias-a", index=2, combined_bits=4.5, state="warning").figures
    for feature in FEATURES:
        for measure in MEASURES:
            labels = {"speaker": "alias-a", "feature": feature, "measure": measure}
            assert get("voxmeter_disclosure_bits", labels) == pytest.approx(
                event.bits(feature, measure)
            )
            assert get("voxmeter_window_disclosure_bits", labels) == pytest.approx(
                event.bits(feature, measure, cumulative=False)
            )
    expected_bounds = (
        event.bounds.basic_bits,
        event.bounds.advanced_bits,
        event.bounds.optimal_bits,
    )
    for bound, value in zip(BOUNDS, expected_bounds, strict=True):
        labels = {"speaker": "alias-a", "bound": bound}
        assert get("voxmeter_composition_bound_bits", labels) == pytest.approx(value)
    assert get("voxmeter_disclosure_ceiling_bits") == pytest.approx(CEILING_BITS)
    assert get("voxmeter_budget_bits", {"speaker": "alias-a"}) == 5.0
    states = {
        s: get("voxmeter_budget_state", {"speaker": "alias-a", "state": s})
        for s in ("ok", "warning", "exceeded")
    }
    assert states == {"ok": 0.0, "warning": 1.0, "exceeded": 0.0}
    assert get("voxmeter_speech_seconds_total", {"speaker": "alias-a"}) == 3.0
    assert get("voxmeter_templates", {"feature": "embedding"}) == 250
    # Latency: window close at monotonic 100.0, metrics set at 100.4.
    assert get("voxmeter_window_latency_seconds_count") == 1
    assert get("voxmeter_window_latency_seconds_sum") == pytest.approx(0.4)
    assert get("voxmeter_stage_seconds_count", {"stage": "features"}) == 1
    assert get("voxmeter_stage_seconds_sum", {"stage": "scorer"}) == pytest.approx(0.01)
    # A second window moves the state, accumulates speech seconds, keeps one series per label.
    exporter.apply(scored("alias-a", index=3, combined_bits=5.5, state="exceeded"))
    assert get("voxmeter_budget_state", {"speaker": "alias-a", "state": "warning"}) == 0.0
    assert get("voxmeter_budget_state", {"speaker": "alias-a", "state": "exceeded"}) == 1.0
    assert get("voxmeter_speech_seconds_total", {"speaker": "alias-a"}) == 6.0
    assert get("voxmeter_calibration_extrapolated", {"feature": "embedding"}) == 0.0
    exporter.apply(scored("alias-a", index=4, combined_bits=5.6, state="exceeded"))
    assert get("voxmeter_calibration_extrapolated", {"feature": "embedding"}) == 1.0


def test_restored_states_and_alerts_counted_by_state() -> None:
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    exporter.apply(started({"alias-b": "exceeded"}, budget_bits=7.0))
    assert get("voxmeter_budget_state", {"speaker": "alias-b", "state": "exceeded"}) == 1.0
    assert get("voxmeter_budget_bits", {"speaker": "alias-b"}) == 7.0
    assert get("voxmeter_alerts_total", {"state": "warning"}) == 0.0  # exported before any alert
    exporter.apply(changed("alias-a", "ok", "warning", seq=1))
    exporter.apply(changed("alias-a", "warning", "exceeded", seq=2))
    exporter.apply(changed("alias-b", "exceeded", "ok", seq=3))
    assert get("voxmeter_alerts_total", {"state": "warning"}) == 1.0
    assert get("voxmeter_alerts_total", {"state": "exceeded"}) == 1.0
    assert get("voxmeter_alerts_total", {"state": "ok"}) == 1.0
    assert get("voxmeter_budget_state", {"speaker": "alias-b", "state": "ok"}) == 1.0
    assert get("voxmeter_budget_state", {"speaker": "alias-a", "state": "exceeded"}) == 1.0


def test_unknown_track_information_gain_follows_top_candidate_and_expires() -> None:
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    exporter.apply(scored("alias-a", combined_bits=2.0))
    exporter.apply(scored("unknown-1", unknown=True, combined_bits=2.0, top_candidate="spk-1"))
    gain = {"track": "unknown-1", "top_candidate": "spk-1"}
    assert get("voxmeter_information_gain_bits", gain) == pytest.approx(1.8)
    exporter.apply(scored("unknown-1", unknown=True, combined_bits=3.0, top_candidate="spk-2"))
    assert get("voxmeter_information_gain_bits", gain) is None  # the old candidate's series went
    assert get(
        "voxmeter_information_gain_bits", {"track": "unknown-1", "top_candidate": "spk-2"}
    ) == pytest.approx(2.7)
    unknown = {"speaker": "unknown-1", "feature": "combined", "measure": "lid"}
    assert get("voxmeter_disclosure_bits", unknown) == pytest.approx(3.0)

    exporter.apply(TrackExpired("unknown-1", "unknown", 9.0, 1_800_000_100.0))
    exposition = _families(registry)
    assert not any('"unknown-1"' in line for line in exposition), "expired series left behind"
    local = {"speaker": "alias-a", "feature": "combined", "measure": "lid"}
    assert get("voxmeter_disclosure_bits", local) == pytest.approx(2.0)
    assert get("voxmeter_speech_seconds_total", {"speaker": "alias-a"}) == 3.0
    exporter.apply(DaemonStopping("end of input", 1_800_000_200.0))  # accepted, changes nothing
    assert get("voxmeter_disclosure_bits", local) == pytest.approx(2.0)


def test_pipeline_stats_become_counter_increments_and_gauges() -> None:
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    assert get("voxmeter_audio_dropped_seconds_total") == 0.0  # present before any stats
    assert get("voxmeter_frames_total", {"kind": "dropped"}) is None  # one unit: seconds
    exporter.apply(stats(1000, 400, 0.0, rtf=0.12))
    exporter.apply(stats(2500, 900, 0.9, errors=2, rtf=0.2))
    assert get("voxmeter_frames_total", {"kind": "total"}) == 2500
    assert get("voxmeter_frames_total", {"kind": "speech"}) == 900
    assert get("voxmeter_audio_dropped_seconds_total") == pytest.approx(0.9)
    assert get("voxmeter_audio_seconds_total") == pytest.approx(2500 * 0.03)
    assert get("voxmeter_audio_device_errors_total") == 2
    assert get("voxmeter_realtime_factor") == pytest.approx(0.2)
    assert get("voxmeter_queue_depth", {"queue": "frames"}) == 3


def test_each_named_source_has_its_own_labelled_counters() -> None:
    """Speech, dropped and refused seconds per source (audio.sources), windows per source."""
    exporter, registry = make_exporter()
    get = registry.get_sample_value
    first = {
        "kitchen": SourceCounts(10.0, 6.0, 0.0, streams=2),
        "stt": SourceCounts(3.0, 2.5, 0.5, streams=1),
    }
    later = {
        "kitchen": SourceCounts(20.0, 9.0, 1.25, 0, refused_streams=1, refused_seconds=4.0),
        "stt": SourceCounts(3.0, 2.5, 0.5, streams=0),
    }
    exporter.apply(replace(stats(1000, 400, 0.0), sources=first))
    exporter.apply(replace(stats(2500, 900, 0.9), sources=later))
    kitchen, stt = {"source": "kitchen"}, {"source": "stt"}
    assert get("voxmeter_source_speech_seconds_total", kitchen) == pytest.approx(9.0)
    assert get("voxmeter_source_speech_seconds_total", stt) == pytest.approx(2.5)
    assert get("voxmeter_source_dropped_seconds_total", kitchen) == pytest.approx(1.25)
    assert get("voxmeter_source_dropped_seconds_total", stt) == pytest.approx(0.5)
    assert get("voxmeter_source_audio_seconds_total", kitchen) == pytest.approx(20.0)
    assert get("voxmeter_source_refused_streams_total", kitchen) == 1
    assert get("voxmeter_source_refused_seconds_total", kitchen) == pytest.approx(4.0)
    assert get("voxmeter_source_streams", kitchen) == 0 and get("voxmeter_source_streams", stt) == 0
    window = scored("alias-a")
    exporter.apply(replace(window, stream=StreamKey("stt", 3)))
    exporter.apply(replace(window, stream=StreamKey("stt", 4)))
    assert get("voxmeter_source_windows_total", stt) == 2
    assert get("voxmeter_source_windows_total", kitchen) is None


def test_alerts_pending_is_read_from_the_outbox_at_scrape_time(tmp_path: Path) -> None:
    db_path = tmp_path / "voxmeter.db"
    with open_store(db_path) as store:
        _, registry = make_exporter(db_path=db_path)
        assert registry.get_sample_value("voxmeter_alerts_pending") == 0.0
        first = store.transition("alias-a", "warning", 4.1, {"alias": "alias-a"}, "v/alerts")
        store.transition("alias-a", "exceeded", 5.2, {"alias": "alias-a"}, "v/alerts")
        assert registry.get_sample_value("voxmeter_alerts_pending") == 2.0
        store.ack(first)
        assert registry.get_sample_value("voxmeter_alerts_pending") == 1.0


def test_unreadable_outbox_leaves_the_gauge_out_rather_than_zero(tmp_path: Path) -> None:
    _, registry = make_exporter(db_path=tmp_path / "missing.db")
    assert registry.get_sample_value("voxmeter_alerts_pending") is None
    assert registry.get_sample_value("voxmeter_realtime_factor") == 0.0  # the rest still scrapes


def test_half_a_tls_configuration_names_the_key(tmp_path: Path) -> None:
    certfile = tmp_path / "server.pem"
    certfile.write_text("x")
    with pytest.raises(ConfigError, match=r"prometheus\.certfile"):
        make_exporter(certfile=str(certfile))


def test_serves_metrics_over_http_and_names_a_busy_port() -> None:
    exporter, _ = make_exporter()
    exporter.apply(scored("alias-a", combined_bits=2.5))
    server = exporter.start_server()
    try:
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as reply:
            text = reply.read().decode()
        assert (
            'voxmeter_disclosure_bits{feature="combined",measure="lid",speaker="alias-a"} 2.5'
            in text
        )
        busy, _ = make_exporter()
        busy.port = exporter.port
        with pytest.raises(ConfigError, match=f"prometheus.port.*{exporter.port}"):
            busy.start_server()
    finally:
        exporter.stop_server()
    assert server.socket.fileno() == -1


def test_run_serves_until_cancelled() -> None:
    exporter, _ = make_exporter()

    async def scenario() -> str:
        task = asyncio.create_task(exporter.run(), name="voxmeter.exporter.prometheus")
        async with asyncio.timeout(60):  # a hang guard only: wait for the server itself
            while exporter._server is None:
                assert not task.done(), "run() ended before serving"
                await asyncio.sleep(0.01)
        url = f"http://127.0.0.1:{exporter.port}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=30).read())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return text.decode()

    assert "voxmeter_mqtt_connected 0.0" in asyncio.run(scenario())
    assert exporter._server is None


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-addext",  # Python 3.13 verifies strictly: a CA without a key usage is refused
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        f"{d}/ca.key",
        "-out",
        f"{d}/ca.pem",
    )
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{d}/{name}.key",
            "-out",
            f"{d}/{name}.csr",
        )
        ext = d / f"{name}.ext"
        ext.write_text(extension + "\n")
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{d}/{name}.csr",
            "-CA",
            f"{d}/ca.pem",
            "-CAkey",
            f"{d}/ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            f"{d}/{name}.pem",
            *(["-extfile", str(ext)] if extension else []),
        )
    return d


def test_https_with_required_client_certificate(certificates: Path) -> None:
    d = certificates
    exporter, _ = make_exporter(
        certfile=str(d / "server.pem"),
        keyfile=str(d / "server.key"),
        client_cafile=str(d / "ca.pem"),
        client_auth_required=True,
    )
    exporter.start_server()
    url = f"https://127.0.0.1:{exporter.port}/metrics"
    try:
        with_cert = ssl.create_default_context(cafile=str(d / "ca.pem"))
        with_cert.load_cert_chain(str(d / "client.pem"), str(d / "client.key"))
        with urllib.request.urlopen(url, timeout=30, context=with_cert) as reply:
            assert b"voxmeter_realtime_factor" in reply.read()
        without_cert = ssl.create_default_context(cafile=str(d / "ca.pem"))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url, timeout=30, context=without_cert).read()
    finally:
        exporter.stop_server()


@pytest.mark.prometheus
def test_a_real_prometheus_scrapes_the_exporter(
    prometheus_server: Callable[..., object],
) -> None:
    exporter, _ = make_exporter()
    exporter.apply(started())
    exporter.apply(scored("alias-a", combined_bits=3.25, state="ok"))
    exporter.start_server()
    try:
        server = prometheus_server([f"127.0.0.1:{exporter.port}"])
        result = server.wait_for(  # type: ignore[attr-defined]
            'voxmeter_disclosure_bits{speaker="alias-a",feature="combined",measure="lid"}'
        )
        assert float(result[0]["value"][1]) == pytest.approx(3.25)
        assert result[0]["metric"]["job"] == "voxmeter"
    finally:
        exporter.stop_server()


def _families(registry: CollectorRegistry) -> list[str]:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode().splitlines()


def test_build_exporters_wires_the_mqtt_connection_into_prometheus(tmp_path: Path) -> None:
    import dataclasses

    from monitor.exporters import build_exporters
    from monitor.settings.sections import Config, MqttSettings

    config = dataclasses.replace(
        Config(), mqtt=MqttSettings(enabled=True), prometheus=PrometheusSettings(port=0)
    )
    with open_store(tmp_path / "v.db") as store:
        prometheus, mqtt = build_exporters(
            config, store=store, db_path=tmp_path / "v.db", device_id="dev"
        )
        assert (prometheus.name, mqtt.name) == ("prometheus", "mqtt")
        assert isinstance(prometheus, PrometheusExporter)
        get = prometheus.registry.get_sample_value
        assert get("voxmeter_mqtt_connected") == 0.0
        mqtt.connection._set_connected(True)  # type: ignore[attr-defined]
        assert get("voxmeter_mqtt_connected") == 1.0
        assert get("voxmeter_alerts_pending") == 0.0
    only_prometheus = build_exporters(
        Config(), store=store, db_path=tmp_path / "v.db", device_id="dev"
    )
    assert [e.name for e in only_prometheus] == ["prometheus"]


def test_the_daemons_cpu_per_stage_is_a_counter_of_every_stage() -> None:
    """``voxmeter_cpu_seconds_total{stage}``: each stage from the first scrape (0 until it
    spends), then the growth of the stats' running totals."""
    from monitor.load.cpu import STAGES

    exporter, registry = make_exporter()
    get = registry.get_sample_value
    assert [get("voxmeter_cpu_seconds_total", {"stage": s}) for s in STAGES] == [0.0] * 4
    first = {"vad": 0.01, "loop": 0.05, "feeder": 0.4, "workers": 0.2}
    exporter.apply(replace(stats(1000, 400, 0.0), cpu_seconds=first))
    exporter.apply(replace(stats(2000, 900, 0.0), cpu_seconds={**first, "feeder": 0.9}))
    assert get("voxmeter_cpu_seconds_total", {"stage": "feeder"}) == pytest.approx(0.9)
    assert get("voxmeter_cpu_seconds_total", {"stage": "loop"}) == pytest.approx(0.05)
