"""A local broker with TLS listeners: :class:`SaslKafka` plus SSL, SASL_SSL (PLAIN users of
:data:`~tests.support.sasl_broker.USERS`), mutual-TLS and wrong-name listeners, their keys and
certificates made with ``openssl`` at start in the broker's folder (:class:`Pki`), for tests of
the client properties that TLS clusters need (``[kafka.client]``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sparsewatch.kafka_local import free_ports
from tests.support.sasl_broker import USERS, SaslKafka, _jaas

CLIENT_KEY_PASSWORD = "client-keypw-3b8e"
"""The password of the mutual-TLS client's encrypted private key (``ssl.key.password``)."""

SERVER_NAMES = "IP:127.0.0.1,DNS:localhost"
"""The subjectAltName of the listeners' certificate."""

OTHER_NAME = "DNS:kafka.other.invalid"
"""The subjectAltName of the certificate the ``WRONGNAME`` listener presents (signed by the same
CA): a client reaching it at 127.0.0.1 must refuse it."""

# listener name -> security protocol; each listens on a free port of 127.0.0.1
_LISTENERS = {"SSL": "SSL", "SASL_SSL": "SASL_SSL", "MTLS": "SSL", "WRONGNAME": "SSL"}


def _openssl(*args: str, cwd: Path) -> None:
    """Run ``openssl ARGS`` in ``cwd``; its stderr in the error when it fails."""
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    """A self-signed CA ``name`` (certificate and key, PEM) in ``folder``."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", key.name, "-out", cert.name, cwd=folder,
    )  # fmt: skip
    return cert, key


def _leaf(folder: Path, name: str, ca: tuple[Path, Path], san: str, *key_args: str) -> None:
    """``name.pem``, a certificate for ``san`` signed by ``ca``, and its PKCS#8 key
    ``name.key``, encrypted as ``key_args`` say (``-aes256 -pass pass:X``), else plain."""
    key, csr, cert = (folder / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
    _openssl("genpkey", "-algorithm", "RSA", "-out", key.name, *key_args, cwd=folder)
    password = ["-passin", key_args[-1]] if key_args else []
    _openssl("req", "-new", "-key", key.name, "-subj", f"/CN={name}", "-out", csr.name,
             *password, cwd=folder)  # fmt: skip
    (folder / f"{name}.ext").write_text(f"subjectAltName={san}\n", encoding="ascii")
    _openssl(
        "x509", "-req", "-in", csr.name, "-CA", ca[0].name, "-CAkey", ca[1].name,
        "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", cert.name, cwd=folder,
    )  # fmt: skip


class Pki:
    """The throw-away keys and certificates of a :class:`TlsKafka`: PEM files in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.ca = folder / "ca.pem"
        """The CA that signed the broker's certificates (a client's ``ssl.ca.location``)."""
        self.other_ca = folder / "other-ca.pem"
        """A CA that signed nothing the broker presents."""
        self.server_keystore = folder / "server.keystore"
        """The listeners' key, certificate and CA (a PEM key store, Kafka 2.7 and later)."""
        self.wrong_name_keystore = folder / "wrongname.keystore"
        """The same for the ``WRONGNAME`` listener, its certificate for :data:`OTHER_NAME`."""
        self.client = folder / "client.pem"
        """The mutual-TLS client's certificate (``ssl.certificate.location``)."""
        self.client_key = folder / "client.key"
        """Its key, encrypted with :data:`CLIENT_KEY_PASSWORD` (``ssl.key.location``)."""

    def make(self) -> None:
        """Write the CAs, the listeners' key stores and the client's certificate and key."""
        self.folder.mkdir(parents=True, exist_ok=True)
        ca = _ca(self.folder, "ca")
        _ca(self.folder, "other-ca")
        for name, san in (("server", SERVER_NAMES), ("wrongname", OTHER_NAME)):
            _leaf(self.folder, name, ca, san)
            parts = (self.folder / f"{name}.{ext}" for ext in ("key", "pem"))
            store = "".join(part.read_text(encoding="ascii") for part in (*parts, self.ca))
            (self.folder / f"{name}.keystore").write_text(store, encoding="ascii")
        _leaf(self.folder, "client", ca, "DNS:sparsewatch-client", "-aes256", "-pass",
              f"pass:{CLIENT_KEY_PASSWORD}")  # fmt: skip


class TlsKafka(SaslKafka):
    """:class:`SaslKafka` with four more client listeners on free ports of 127.0.0.1, all with
    PEM key stores (Kafka 2.7 and later) made at start (:attr:`pki`):

    - ``SSL``: TLS, the server certificate for 127.0.0.1 and localhost (:data:`SERVER_NAMES`);
    - ``SASL_SSL``: the same with SASL PLAIN (the users of :class:`SaslKafka`);
    - ``MTLS``: SSL requiring a client certificate signed by the CA;
    - ``WRONGNAME``: SSL presenting a certificate of the same CA for another name only.

    :meth:`bootstrap` gives each one's address once :meth:`up` returned."""

    ports: dict[str, int]

    @property
    def pki(self) -> Pki:
        """The keys and certificates, in the broker's folder."""
        return Pki(self.run_dir / "pki")

    def bootstrap(self, listener: str) -> str:
        """The address of ``listener`` (a name of the class docstring)."""
        return f"127.0.0.1:{self.ports[listener]}"

    def _write_config(self, port: int, controller_port: int) -> Path:
        path = super()._write_config(port, controller_port)
        pki = self.pki
        if not pki.ca.exists():
            pki.make()
        self.ports = dict(zip(_LISTENERS, free_ports(len(_LISTENERS)), strict=True))
        added = ",".join(f"{name}://127.0.0.1:{p}" for name, p in self.ports.items())
        extend = {
            "listeners": f",{added}",
            "advertised.listeners": f",{added}",
            "listener.security.protocol.map": "".join(f",{n}:{p}" for n, p in _LISTENERS.items()),
        }
        lines = []
        for line in path.read_text(encoding="ascii").splitlines():
            key, _, value = line.partition("=")
            lines.append(f"{key}={value}{extend.get(key, '')}")
        lines += [
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={pki.server_keystore}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={pki.ca}",
            f"listener.name.wrongname.ssl.keystore.location={pki.wrong_name_keystore}",
            "listener.name.mtls.ssl.client.auth=required",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={_jaas(USERS)}",
        ]
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        return path
