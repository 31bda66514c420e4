"""Certificates made with the openssl command for TLS tests: a private CA, a server certificate
for 127.0.0.1 and localhost, one for another name only, a client certificate, and an unrelated
CA that signed none of them. P-256 keys: quick to make. The CAs carry a key usage (keyCertSign):
Python 3.13's default TLS context verifies strictly (VERIFY_X509_STRICT) and refuses a CA
without one."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certificates:
    """Paths of the PEM files (``<name>.pem`` and ``<name>.key`` in ``directory``)."""

    directory: Path

    def pem(self, name: str) -> str:
        return str(self.directory / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.directory / f"{name}.key")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _key_args(directory: Path, name: str) -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{directory}/{name}.key"]  # fmt: skip


def make_certificates(directory: Path) -> Certificates:
    """``ca``, ``other-ca`` (signs nothing here), ``server`` (IP 127.0.0.1, DNS localhost),
    ``wrong-name`` (DNS broker.invalid only) and ``client``, valid for two days."""
    d = directory
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", *_key_args(d, ca), "-days", "2", "-subj", f"/CN=test-{ca}",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-out", f"{d}/{ca}.pem")  # fmt: skip
    for name, alt in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("wrong-name", "subjectAltName=DNS:broker.invalid"),
        ("client", ""),
    ):
        _openssl("req", *_key_args(d, name), "-subj", f"/CN={name}", "-out", f"{d}/{name}.csr")
        ext = d / f"{name}.ext"
        ext.write_text(alt + "\n")
        _openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/ca.pem",
                 "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-days", "2",
                 "-out", f"{d}/{name}.pem", *(["-extfile", str(ext)] if alt else []))  # fmt: skip
    return Certificates(d)


@pytest.fixture(scope="session")
def tls_certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """One set of :func:`make_certificates` for the run; skips where openssl is missing."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return make_certificates(tmp_path_factory.mktemp("certificates"))
