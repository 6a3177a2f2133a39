"""TLS, mutual TLS and bearer tokens from the Python client against a real readerd."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import readerd
from helpers import Server

SPEC = {"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 4}}


def write_lines(root: Path) -> None:
    (root / "lines.txt").write_text("".join(f"line {i}\n" for i in range(10)))


def records(stream: readerd.Stream) -> int:
    return sum(len(batch["value"]) for batch in stream)


def test_tokens_grant_containers(data_root: Path, tmp_path: Path) -> None:
    write_lines(data_root)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"token": "team-a-0123456789abcdef", "containers": ["a"]}]}))
    server = Server(data_root, tmp_path / "state", tmp_path / "log", ["--auth-tokens", str(tokens)])
    server.start()
    try:
        with readerd.Client(server.addr, token="team-a-0123456789abcdef") as client:
            assert records(client.read(SPEC, container="a")) == 10
            with pytest.raises(readerd.ReaderdError) as denied:
                records(client.read(SPEC, container="b"))
            assert denied.value.code == "PERMISSION_DENIED"
        for client in (readerd.Client(server.addr), readerd.Client(server.addr, token="wrong-token-0000000000")):
            with pytest.raises(readerd.ReaderdError) as refused:
                records(client.read(SPEC, container="a"))
            assert refused.value.code == "UNAUTHENTICATED"
            client.close()
    finally:
        server.stop()


def make_pki(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (openssl)."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=test-ca")  # fmt: skip
    for name, extension in [("server", "subjectAltName=DNS:localhost,IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")]:
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        (directory / f"{name}.ext").write_text(extension + "\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext")  # fmt: skip


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make certificates")
def test_mutual_tls(data_root: Path, tmp_path: Path) -> None:
    write_lines(data_root)
    pki = tmp_path / "pki"
    pki.mkdir()
    make_pki(pki)
    args = ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
            "--tls-client-ca", str(pki / "ca.pem")]  # fmt: skip
    server = Server(data_root, tmp_path / "state", tmp_path / "log", args)
    server.start()
    ca = (pki / "ca.pem").read_bytes()
    try:
        identity = {"cert_chain": (pki / "client.pem").read_bytes(), "private_key": (pki / "client.key").read_bytes()}
        with readerd.Client(server.addr, tls_root_certs=ca, **identity) as client:
            assert records(client.read(SPEC)) == 10
        no_identity = readerd.Client(server.addr, tls_root_certs=ca, retry=readerd.RetryPolicy(attempts=1))
        with pytest.raises(readerd.ReaderdError):
            records(no_identity.read(SPEC))
        no_identity.close()
    finally:
        server.stop()
