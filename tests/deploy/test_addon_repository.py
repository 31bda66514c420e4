"""The repository is a Home Assistant add-on repository the Supervisor accepts, and the add-on's
image builds from what the Supervisor gives its build.

The rules below are the Supervisor's, read from its source (home-assistant/supervisor, 2026.08):
- ``supervisor/store/repository.py`` (``RepositoryGit.validate``): a git repository is an add-on
  repository only with ``repository.yaml`` (or ``.yml``, ``.json``) at its ROOT, valid against
  ``supervisor/store/validate.py`` ``SCHEMA_REPOSITORY_CONFIG`` (``name`` required, ``url`` a URL,
  ``maintainer`` text);
- ``supervisor/utils/common.py`` (``find_one_filetype``): the repository file actually read is
  the first ``**/repository.*`` the glob meets, so there must be no other one;
- ``supervisor/store/data.py`` (``_find_app_configs``): every ``**/config.{yaml,yml,json}`` at
  any depth, outside folders starting with ``.`` or named ``rootfs``, is read as an add-on: a
  nested add-on folder is found, and any other such file would be a broken add-on;
- ``supervisor/apps/model.py`` (``need_build``): without ``image:`` the Supervisor builds the
  image on the user's machine; ``supervisor/apps/build.py``: it runs ``docker buildx build .`` in
  the add-on's folder (that folder is the whole build context), with ``Dockerfile`` (or
  ``Dockerfile.<arch>``) and the build args ``BUILD_ARCH`` and ``BUILD_VERSION`` (``BUILD_FROM``
  only with a ``build.yaml``, deprecated since Supervisor 2026.04.0, which logs a warning at
  every build of an add-on that still has one).

No container engine can build the image here (no daemon, and the base image's registry is out of
reach), so the Dockerfile's install steps are run in a clean virtual environment instead: the
release's source archive installed as pip installs it in the image, then the entry points the
add-on's run.sh starts.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

import monitor
from tests.deploy.promql import DEPLOY

ROOT = DEPLOY.parent
ADDON = DEPLOY / "homeassistant-addon" / "voxmeter"
SUFFIXES = (".yaml", ".yml", ".json")  # supervisor/const.py FILE_SUFFIX_CONFIGURATION
URL = re.compile(r"https?://[^\s/]+(/\S*)?")
#: supervisor/apps/validate.py RE_DOCKER_IMAGE_BUILD (a base image with its tag)
BASE_IMAGE = re.compile(r"([a-zA-Z\-.:\d{}]+/)*?([\-\w{}]+)/([\-\w{}]+)(:[.\-\w{}]+)?")


def tracked_files() -> list[Path]:
    """The files a clone of the repository holds (what the Supervisor's git clone sees)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [Path(name) for name in listed.decode().split("\0") if name]


def named(files: list[Path], stem: str) -> list[Path]:
    """What the Supervisor's ``**/<stem>.*`` glob takes, outside ``.``-folders and rootfs."""
    return [
        path
        for path in files
        if path.stem == stem
        and path.suffix in SUFFIXES
        and not any(part.startswith(".") or part == "rootfs" for part in path.parts[:-1])
    ]


def test_repository_yaml_is_at_the_root_and_alone() -> None:
    files = tracked_files()
    assert named(files, "repository") == [Path("repository.yaml")]
    data = yaml.safe_load((ROOT / "repository.yaml").read_text())
    assert isinstance(data["name"], str) and data["name"]
    assert URL.fullmatch(data["url"])
    assert isinstance(data.get("maintainer", ""), str)


def test_the_only_addon_config_is_the_addons() -> None:
    """Every config.{yaml,yml,json} in the repository is read as an add-on: exactly one."""
    assert named(tracked_files(), "config") == [ADDON.relative_to(ROOT) / "config.yaml"]


def test_the_image_is_built_not_pulled() -> None:
    config = yaml.safe_load((ADDON / "config.yaml").read_text())
    assert "image" not in config  # else the Supervisor pulls an image nothing publishes
    assert (ADDON / "Dockerfile").is_file()
    assert not list(ADDON.glob("Dockerfile.*"))  # one Dockerfile for both architectures
    assert not [p for p in ADDON.iterdir() if p.stem == "build" and p.suffix in SUFFIXES]


def dockerfile() -> str:
    return (ADDON / "Dockerfile").read_text()


def build_args() -> dict[str, str]:
    """ARG defaults of the Dockerfile (what BUILD_VERSION and the source fall back to)."""
    found = re.findall(r"^ARG (\w+)=(\S+)$", dockerfile(), re.M)
    return dict(found)


def test_the_dockerfile_builds_from_its_own_folder() -> None:
    """The build context is the add-on folder: every COPY source is in it, and the base image
    is chosen by BUILD_ARCH for each architecture config.yaml lists."""
    text = dockerfile()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        *sources, _target = line.split()
        for source in sources:
            assert (ADDON / source).is_file(), f"COPY {source}: not in the build context"
    froms = re.findall(r"^FROM (\S+)$", text, re.M)
    assert len(froms) == 1 and "${BUILD_ARCH}" in froms[0]
    config = yaml.safe_load((ADDON / "config.yaml").read_text())
    assert set(config["arch"]) == {"amd64", "aarch64"}  # the Debian base's architectures
    for arch in config["arch"]:
        image = froms[0].replace("${BUILD_ARCH}", arch)
        assert BASE_IMAGE.fullmatch(image) and image.endswith("-base-debian:bookworm"), image
    assert re.search(r"^ARG BUILD_ARCH=", text, re.M)  # declared before FROM, so FROM sees it
    assert build_args()["BUILD_VERSION"] == str(config["version"])
    # the add-on installs the release of its version: one version in every place (Releasing,
    # docs/development.md)
    assert str(config["version"]) == monitor.__version__


def test_the_dockerfile_installs_what_pyproject_pins() -> None:
    """The same torch pin and --no-deps packages as pyproject.toml, and voxmeter from the
    source archive of the release whose version the Supervisor passes (BUILD_VERSION)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    text = dockerfile()
    torch = next(d for d in project["project"]["dependencies"] if d.startswith("torch=="))
    assert f" {torch.split()[0]}" in text
    no_deps = " ".join(project["tool"]["voxmeter"]["no-deps"])
    assert f"pip install --no-deps {no_deps}" in text
    assert build_args()["VOXMETER_SOURCE"] == (
        f"{project_url()}/archive/refs/tags/v${{BUILD_VERSION}}.tar.gz"
    )
    assert '"voxmeter @ ${VOXMETER_SOURCE}"' in text
    assert "voxmeter models fetch" in text


def project_url() -> str:
    return str(yaml.safe_load((ROOT / "repository.yaml").read_text())["url"])


def source_archive(dest: Path) -> Path:
    """What the release's archive holds: the tracked files under voxmeter-<version>/."""
    version = yaml.safe_load((ADDON / "config.yaml").read_text())["version"]
    archive = dest / f"voxmeter-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in tracked_files():
            if (ROOT / path).is_file():
                tar.add(ROOT / path, arcname=f"voxmeter-{version}/{path}")
    return archive


def run(args: list[str], env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{args}: {result.stderr[-2000:]}"
    return result.stdout


@pytest.mark.slow
def test_the_dockerfile_install_steps_in_a_clean_venv(tmp_path: Path) -> None:
    """``pip install "voxmeter @ <archive>"`` into a fresh venv, then what run.sh starts. The
    pinned third-party packages come from this checkout's environment (a path line, so nothing is
    downloaded and its editable voxmeter is not seen); voxmeter must come from the archive."""
    venv = tmp_path / "venv"
    # no pip or setuptools of its own: this environment's (setuptools >= 77, as pyproject asks)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], {}, tmp_path)
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (Path(site.strip()) / "pinned-dependencies.pth").write_text(deps + "\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    archive = source_archive(tmp_path)
    pip = [str(python), "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
    run([*pip, "--no-index", "--ignore-installed", f"voxmeter @ {archive.as_uri()}"], env, tmp_path)
    where = run([str(python), "-c", "import monitor; print(monitor.__file__)"], env, tmp_path)
    assert where.startswith(site.strip()), where  # the installed copy, not this checkout
    assert "Usage" in run([str(venv / "bin" / "voxmeter"), "--help"], env, tmp_path)
    relay = [str(python), "-m", "monitor.relay.process", "--help"]
    assert "--config" in run(relay, env, tmp_path)
    # the options run.sh maps, read by the installed package with its shipped calibration
    config = yaml.safe_load((ADDON / "config.yaml").read_text())
    (tmp_path / "options.json").write_text(json.dumps(config["options"]))
    mapping = [str(python), str(ADDON / "options_to_config.py"), "options.json", "config.toml"]
    run([*mapping, "--addon-slug", "0123abcd_voxmeter"], env, tmp_path)
    check = (
        "from monitor.settings.config import load_config;"
        "from monitor.calibration.buckets import load_default;"
        "c = load_config('config.toml', []);"
        "load_default(c.features.embedding);"
        "print(c.homeassistant.configuration_url)"
    )
    shown = run([str(python), "-c", check], env, tmp_path)
    assert shown.strip() == "homeassistant://hassio/addon/0123abcd_voxmeter"


def test_no_option_or_file_names_a_missing_operations_section() -> None:
    """Links into docs/operations.md from the add-on and the Home Assistant page name sections
    that exist."""
    headings = set(re.findall(r"^#+ (.+)$", (ROOT / "docs" / "operations.md").read_text(), re.M))
    for path in (*ADDON.iterdir(), ROOT / "repository.yaml", ROOT / "docs" / "home-assistant.md"):
        if path.suffix in (".md", ".yaml", ".sh", ".py", "") and path.is_file():
            for section in re.findall(r'operations\.md[^"\n]*?"([^"]+)"', path.read_text()):
                assert section in headings, (path.name, section)
            assert not re.search(r"operations\.md,? (section|§) ?\d", path.read_text()), path.name
