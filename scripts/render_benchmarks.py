"""Render docs/benchmarks/*.md (and their plots) from bench/results/*.json.

Every figure on a benchmark page comes from a results file in the common schema
(``bench.common.Run``); the pages are never edited by hand. ``--check`` renders into a
temporary folder and fails when a committed page differs::

    python scripts/render_benchmarks.py            # rewrite docs/benchmarks/
    python scripts/render_benchmarks.py --check    # exit 1 when a page is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGES_DIR = ROOT / "docs" / "benchmarks"
IMAGES = "images"
MAX_ROWS = 40  # a longer list stays in the JSON file


@dataclass(frozen=True)
class Result:
    """One results file shown on a page: its name (``bench/results/<name>.json``), a heading,
    what it measures, and top-level figures left to the JSON file (too long for a table)."""

    name: str
    title: str
    about: str
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    slug: str
    title: str
    intro: str
    results: tuple[Result, ...]


PAGES = (
    Page("edge", "Edge budget: the daemon's CPU, latency and memory",
         "What the daemon costs on a small device: CPU per second of audio, the delay from the "
         "end of a window to its metric, memory over an hour, and how it behaves beside a "
         "voice assistant. CPU figures are process CPU seconds per audio second after warm-up "
         "(robust to load); latencies are wall clock at the load shown, so a loaded machine "
         "inflates them.", (
             Result("edge-side", "CPU per second of speech and of silence",
                    "The previous release and this one replay the same corpus speech (80.8 s, "
                    "72.8 s of it speech) and 60 s of room noise, paced, N = 10³ templates: "
                    "process CPU per second of speech and of silence, and the event-loop "
                    "thread's own, with the default attacker of each release; this release "
                    "once more with the phone feature off (its difference: the phone's cost)."),
             Result("edge", "The previous release against its predecessor: latency, scrapes",
                    "Measured for the previous release (ECAPA, before the CAM++ int8 default; "
                    "this release's CPU is in the run above): both replay the same 80.8 s of "
                    "paced corpus speech, interleaved, N = 10³ templates, every feature "
                    "measured at normal priority so that both do the same work."),
             Result("edge-quota", "A quarter of one core",
                    "Both releases at once, each in a cgroup capped at 25 % of a core, 600 s "
                    "of paced speech: embedding lag, audio dropped, speech shed."),
             Result("edge-assistant", "Beside a speech-to-text service on one core",
                    "A Wyoming ASR server and the daemon pinned to one core: the assistant's "
                    "transcript latency alone, beside the daemon, and alone again."),
             Result("edge-profile", "Where the CPU goes",
                    "One paced replay, CPU per audio second per stage and per thread."),
             Result("edge-features", "CPU per extractor and window",
                    "Milliseconds of CPU per 3 s window for each feature extractor."),
             Result("edge-int8-shipped", "int8 embedding networks",
                    "The shipped static int8 networks against float32: CPU per 3 s window, "
                    "cosine to float32, and the corpus EER."),
             Result("edge-ort-settings", "ONNX Runtime session settings",
                    "CPU milliseconds per 3 s window under each ONNX Runtime session setting."),
             Result("phone-model-disclosure", "The phone network against pocketsphinx",
                    "Phone disclosure at 3 s on the 125 test speakers (12 s templates, LID "
                    "weight cross-fitted on the test speakers for both): the default phone "
                    "network must not under-report pocketsphinx's MeanD or mean LID by more "
                    "than 0.05 bits."),
             Result("phone-model-train", "Training the phone network",
                    "scripts/train_phone_model.py: train speakers only, a seeded tenth of them "
                    "held out for early stopping; frame accuracy against pocketsphinx's "
                    "segmentation, parameters, bytes, CPU."),
             Result("edge-phone-topn", "All-phone decoders",
                    "MeanD at 3 s on the 125 test speakers and decoder CPU per audio second "
                    "for the shipped decoder and cheaper candidates (rule: under-report by at "
                    "most 0.05 bits)."),
             Result("edge-phone-ds-topn", "Cheaper all-phone decoders",
                    "Frame downsampling with two Gaussians per frame: MeanD at 3 s on the 125 "
                    "test speakers against the shipped decoder's, and decoder CPU per audio "
                    "second."),
             Result("daemon", "Scoring and end-to-end latency",
                    "Scoring one window against N templates, and a paced corpus replay through "
                    "the whole daemon (VAD, three features, tracking, scoring, ledger, "
                    "Prometheus).", skip=("paced_per_backend",)),
             Result("daemon-embedding-backends", "The daemon per embedding backend",
                    "The paced replay once per embedding backend, and a 10-minute replay "
                    "as fast as possible."),
             Result("daemon-long", "Memory over an hour",
                    "An hour of speech replayed as fast as possible: resident memory after "
                    "the first minute and at the end."),
         )),
    Page("tracking", "Who is speaking: tracking and rooms",
         "Household streams made from the corpus (members enrolled, strangers not), run "
         "through the daemon: how often a window is attributed to the right person, how "
         "strangers are tracked, and how close each person's disclosure is to the truth.", (
             Result("tracking", "Tracking at 16 and 8 kHz",
                    "Streams of 6–8 minutes per backend and sample rate, embedding feature."),
             Result("tracking-turns", "Turn changes, this release against the previous one",
                    "The previous release embedded every 1 s part; this one scores turn "
                    "changes and embeds parts only where uncertain."),
             Result("rooms", "In a room: reverberation, a television, an 8 kHz device",
                    "The same households dry, in a simulated living room, with a television "
                    "talking, and through an 8 kHz device."),
         )),
    Page("protection", "Protection: what the assistant receives",
         "The anonymiser's cost and what it hides: the corpus audit of an ignorant and a "
         "lazy-informed attacker, the speech recogniser's word error rate, and the α "
         "trade-off.", (
             Result("protect", "The shipped anonymiser (α drawn in [0.5, 0.9])",
                    "Anonymiser CPU, and the offline audit on the corpus's test split."),
             Result("protect-alphas", "The α trade-off",
                    "Every α on the same 25-speaker subset: EER and MeanD for both attackers, "
                    "WER before and after.", skip=("runs",)),
             Result("protect-curve", "The α curve against the semi-informed attacker",
                    "Every α on the same 25-speaker subset with ECAPA int8, each attacked by a "
                    "back-end trained for it: EER and MeanD for the four attackers, command "
                    "accuracy and WER before and after.", skip=("runs",)),
             Result("protect-campplus-subset", "Four attackers with the default network",
                    "The 25-speaker subset at α drawn in [0.5, 0.9] with CAM++ int8."),
             Result("semi-informed-train-ecapa-int8", "Semi-informed back-end, ECAPA int8",
                    "LDA on the train speakers anonymised at α drawn in [0.5, 0.9]: the "
                    "dimension's two-fold validation EER."),
             Result("semi-informed-train-campplus-int8", "Semi-informed back-end, CAM++ int8",
                    "LDA on the train speakers anonymised at α drawn in [0.5, 0.9]: the "
                    "dimension's two-fold validation EER."),
             Result("received", "What the assistant received, measured live",
                    "CPU per protected audio second of reproducing and scoring the received "
                    "audio."),
         )),
    Page("features", "Audio, features and the reference set",
         "The front end on corpus speech, one thread, CPU time; and how many reference voices "
         "a disclosure figure needs: with N voices a figure is at most log2 N bits, and with "
         "too few one window of speech reaches that ceiling.", (
             Result("features", "The front end", "Read, VAD, F0, phones and embedding on 60 s "
                    "of corpus speech; our F0 against its peers."),
             Result("audio", "Voice activity detection", "VAD alone, real-time factor."),
             Result("embedding", "Embedding backends",
                    "Speed on 3 s windows and same- against different-speaker separation on "
                    "the test speakers (cosine)."),
             Result("reference-set", "Windows at the ceiling by the size of the reference set",
                    "One held-out window of each member of sets of 4 to 250 corpus speakers, "
                    "scored for the budget's figure; the shares at every size are also "
                    "predicted from the largest set, which checks the extrapolation beyond the "
                    "corpus."),
         )),
    Page("population", "Disclosure against a declared population",
         "The figure against a population of N_pop identities (a town, a country, the world), "
         "from a model fitted on the reference speakers: checked on corpus speakers it has not "
         "seen at every N the corpus allows, and followed over a day of speech.", (
             Result("population", "The model against what is measured, held-out speakers",
                    "Fitted on the train speakers' windows; each test speaker's window (one "
                    "utterance, about 3 s) predicted from its scores against the train "
                    "speakers' templates and its own, against the figures measured among N test "
                    "speakers (median over random sets; N = 125 is every test speaker, 250 "
                    "every corpus speaker). The half-reference rows fit on 62 train speakers "
                    "only: the step beyond the reference population."),
             Result("population-day", "The figure over a day",
                    "Test speakers as household members beside the shipped reference "
                    "population; their later utterances a day's commands through the daemon's "
                    "scorer, received view and ledger at N_pop = 10³, 10⁶ and 8·10⁹, spoken and "
                    "protected (strongest attacker), medians over speakers."),
         )),
    Page("streams", "Several sources, the Wyoming proxy and the relay",
         "Several audio sources in one daemon, and the delay the daemon adds between a "
         "satellite and the assistant.", (
             Result("streams", "Several sources", "Per-stream CPU from 1 to 4 streams."),
             Result("wyoming_proxy", "Wyoming proxy, in process",
                    "Latency the proxy adds to each audio chunk and to the transcript."),
             Result("wyoming_relay", "Wyoming relay process",
                    "The same through the separate relay process, and its memory."),
             Result("wyoming_relay_protect", "Relay process with protection",
                    "The relay anonymising the audio it forwards."),
         )),
    Page("offline", "Offline scale and the store",
         "Large corpora and score files: time and memory of the offline commands.", (
             Result("offline_scale", "Score files and score matrices",
                    "`voxmeter score` on 10⁶ and 10⁷ trial lines and on a 10⁴ × 10⁴ matrix; "
                    "a 10⁵ × 10⁵ matrix on a two-worker Dask cluster."),
             Result("disclosure", "The disclosure core on 10⁸ scores",
                    "Ranks, SRD fits and LID on a synthetic 10⁴ × 10⁴ matrix."),
             Result("long_file", "One long file, 10 min to 2 h",
                    "`voxmeter features FILE` on back-to-back corpus speech: peak memory "
                    "and CPU."),
             Result("long_file-flac", "Two hours of FLAC", "The 2 h FLAC run alone."),
             Result("long_file-wav", "Two hours of WAV", "The 2 h WAV run alone."),
             Result("store_open", "Opening the store", "Opening a database of 10⁴ and 10⁵ "
                    "identities for writing and read-only."),
         )),
)  # fmt: skip


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())  # type: ignore[no-any-return]


def number(value: Any) -> str:
    """A figure as a table shows it: 4 significant digits, ``—`` when absent."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Scalar leaves of nested dicts as (dotted path, value); short lists of scalars inline,
    every other list left to the JSON file."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    elif is_scalar(value):
        yield prefix, value
    elif isinstance(value, list) and len(value) <= 6 and all(is_scalar(v) for v in value):
        yield prefix, ", ".join(number(v) for v in value)


#: How a side-by-side run's two halves read on a page.
RELEASES = {"old.": "previous release: ", "new.": "this release: "}


def label(path: str) -> str:
    for short, long in RELEASES.items():
        if path.startswith(short):
            return long + path.removeprefix(short)
    return path


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def grid(records: dict[str, dict[str, Any]]) -> list[str]:
    """Records (name → nested dict) as one table: a column per record when there are few
    records and many figures, else a row per record."""
    flat = {name: dict(flatten(body)) for name, body in records.items()}
    columns: list[str] = []
    for body in flat.values():
        columns += [c for c in body if c not in columns]
    if not columns:
        return []
    names = list(flat)
    if len(columns) > 8 and len(names) <= 8:
        rows = [[label(c), *(number(flat[n].get(c)) for n in names)] for c in columns]
        return table(["figure", *names], rows)
    rows = [[n, *(number(flat[n].get(c)) for c in columns)] for n in names[:MAX_ROWS]]
    return table(["", *(label(c) for c in columns)], rows)


def figures_section(figures: dict[str, Any], skip: tuple[str, ...]) -> list[str]:
    """Top-level scalars in one table, then one table per nested figure."""
    lines: list[str] = []
    scalars = [(k, v) for k, v in flatten({k: v for k, v in figures.items() if is_scalar(v)})]
    if scalars:
        lines += table(["figure", "value"], _rows(scalars))
    for key, value in figures.items():
        if not is_scalar(value) and key not in skip:
            lines += section(key.replace("_", " "), value, depth=0)
    left = [k for k in figures if k in skip]
    if left:
        lines += [f"Also in the results file: {', '.join(f'`{k}`' for k in left)}.", ""]
    return lines


def section(path: str, value: Any, *, depth: int) -> list[str]:
    """A nested figure under a bold ``path``: a record of records as one grid; a record that
    mixes figures and records as a table of its figures, then each record in turn (up to two
    levels; deeper ones are flattened into dotted names)."""
    records = isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values())
    if isinstance(value, list) or records or depth >= 2:
        body = subtable(value)
        return [f"**{path}**", "", *body] if body else []
    nested = {k: v for k, v in value.items() if isinstance(v, dict) or _records(v)}
    pairs = list(flatten({k: v for k, v in value.items() if k not in nested}))
    lines = [f"**{path}**", "", *table(["figure", "value"], _rows(pairs))] if pairs else []
    for key, inner in nested.items():
        lines += section(f"{path} › {key}", inner, depth=depth + 1)
    return lines


def _records(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _rows(pairs: list[tuple[str, Any]]) -> list[list[str]]:
    return [[f"`{k}`", number(v)] for k, v in pairs]


def subtable(value: Any) -> list[str]:
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return grid({number(_label(v, i)): v for i, v in enumerate(value[:MAX_ROWS])})
        if all(is_scalar(v) for v in value):
            return [", ".join(number(v) for v in value[:MAX_ROWS]), ""]
        return [f"{len(value)} entries, in the results file.", ""]
    if all(isinstance(v, dict) for v in value.values()):
        return grid(value)
    return table(["figure", "value"], _rows(list(flatten(value))))


def _label(record: dict[str, Any], index: int) -> Any:
    for key in (
        "row",
        "backend",
        "decoder",
        "graph",
        "alpha",
        "streams",
        "identities",
        "format",
        "references",
    ):
        if key in record:
            extra = record.get("setting") or record.get("variant")
            return f"{record[key]}: {extra}" if extra else record[key]
    return index + 1


def margin(target: dict[str, Any]) -> str:
    """By how much a target is met or missed, as a reader compares it."""
    value, bound, op = target["value"], target["bound"], target["op"]
    gap = abs(value - bound)
    word = "met" if target["met"] else "missed"
    if bound and value and not target["met"] and op in ("<=", "<") and value / bound >= 2:
        return f"{word}: {value / bound:.1f}× the bound"
    return f"{word} by {number(float(gap))}"


def run_line(run: dict[str, Any]) -> list[str]:
    load = run["load_average"]

    def shown(values: list[float] | None) -> str:
        return "unknown" if not values else " / ".join(f"{v:.1f}" for v in values)

    features = f", {', '.join(run['cpu_features'])}" if run["cpu_features"] else ""
    return [
        f"Run {run['date']} on {run['cpu_model']} ({run['cores']} cores{features}); "
        f"load average at start {shown(load['start'])}, at end {shown(load['end'])}.",
        "",
        "```sh",
        run["command"].replace("; ", "\n"),
        "```",
        "",
    ]


def targets_table(run: dict[str, Any]) -> list[str]:
    if not run["targets"]:
        return []
    rows = [
        [t["name"], number(t["value"]), f"{t['op']} {number(t['bound'])}", margin(t)]
        + ([t["note"]] if any(x["note"] for x in run["targets"]) else [])
        for t in run["targets"]
    ]
    header = ["target", "measured", "bound", "met?"]
    if any(t["note"] for t in run["targets"]):
        header.append("note")
    return table(header, rows)


def render_result(result: Result, plots: dict[str, str]) -> list[str]:
    run = load(result.name)
    lines = [f"## {result.title}", "", result.about, "", *run_line(run)]
    lines += targets_table(run)
    if result.name in plots:
        lines += [f"![{result.title}]({plots[result.name]})", ""]
    lines += figures_section(run["figures"], result.skip)
    lines += [f"Source: `bench/results/{result.name}.json`.", ""]
    return lines


def render_page(page: Page, plots: dict[str, str]) -> str:
    lines = [f"# {page.title}", "", page.intro, ""]
    for result in page.results:
        lines += render_result(result, plots)
    return "\n".join(lines).rstrip() + "\n"


def render_index() -> str:
    lines = [
        "# Benchmarks",
        "",
        "Every figure on these pages is generated from `bench/results/*.json` "
        "(`python scripts/render_benchmarks.py`); each results file records the command, the "
        "CPU, the load average at start and end, and its targets met or missed. Run a "
        "benchmark with `python -m bench NAME`.",
        "",
    ]
    rows = []
    for page in PAGES:
        lines.append(f"- [{page.title}]({page.slug}.md)")
        for result in page.results:
            run = load(result.name)
            met = sum(t["met"] for t in run["targets"])
            rows.append([f"[{result.title}]({page.slug}.md)", run["date"][:10], run["cpu_model"],
                         f"{met} of {len(run['targets'])}" if run["targets"] else "—"])  # fmt: skip
    lines += ["", "## Targets at a glance", ""]
    lines += table(["results", "date", "CPU", "targets met"], rows)
    return "\n".join(lines).rstrip() + "\n"


#: How a recorded command names a place on the machine that ran it, and what a reader is shown
#: instead: results files record the command as typed, but a page must not send a reader to
#: another machine's scratch folders.
PORTABLE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^flock \S+ (?:env )?", re.M), ""),  # the benchmark machine's lock
    (re.compile(r"--baseline (?:/|~)\S*"), "--baseline <checkout of the previous release>"),
    (re.compile(r"(?:/|~)\S*/shared/data/(\w+)"), r"../shared/data/\1"),  # the corpus beside
    (re.compile(r"(?:/|~)\S*/(bench/results/\S*)"), r"\1"),  # a checkout's own results
    (
        re.compile(
            r"(?:(?<=[\s=`])|^)(?:/tmp|/work|/root|/home|~)/(?:[^\s|`]*/)?([^\s|`/]+)", re.M
        ),
        r"\1",
    ),  # any other scratch file: its name only
)


def portable(text: str) -> str:
    """``text`` with the development machine's paths replaced as :data:`PORTABLE` says."""
    for pattern, replacement in PORTABLE:
        text = pattern.sub(replacement, text)
    return text


def render(out: Path, *, images: bool = True) -> list[Path]:
    """Write every page (and, with ``images``, every plot) under ``out``; return the pages."""
    from render_plots import PLOTS  # scripts/render_plots.py, beside this script

    out.mkdir(parents=True, exist_ok=True)
    plots = {name: f"{IMAGES}/{name}.png" for name in PLOTS}
    if images:
        (out / IMAGES).mkdir(exist_ok=True)
        for name, draw in PLOTS.items():
            draw(load(name), out / plots[name])
    written = [out / "index.md"]
    written[0].write_text(portable(render_index()))
    for page in PAGES:
        path = out / f"{page.slug}.md"
        path.write_text(portable(render_page(page, plots)))
        written.append(path)
    return written


def stale() -> list[str]:
    """Pages whose committed text differs from a fresh rendering, and plots that are missing."""
    from render_plots import PLOTS

    with tempfile.TemporaryDirectory() as scratch:
        fresh = render(Path(scratch), images=False)
        problems = [
            f"docs/benchmarks/{p.name}"
            for p in fresh
            if not (PAGES_DIR / p.name).is_file()
            or (PAGES_DIR / p.name).read_text() != p.read_text()
        ]
    problems += [
        f"docs/benchmarks/{IMAGES}/{name}.png"
        for name in PLOTS
        if not (PAGES_DIR / IMAGES / f"{name}.png").is_file()
    ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a page is stale")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"{problem}: stale; run python scripts/render_benchmarks.py", file=sys.stderr)
        return 1 if problems else 0
    for path in render(PAGES_DIR):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
