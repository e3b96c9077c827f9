"""A local broker with a SASL listener: the project's :class:`LocalKafka` plus a SASL_PLAINTEXT
listener whose PLAIN users are :data:`USERS`, for tests of the client properties that secured
clusters need (``[kafka.client]``)."""

from __future__ import annotations

from pathlib import Path

from sparsewatch.kafka_local import LocalKafka, free_ports

USERS = {"alice": "alice-secret-7f3a"}
"""PLAIN user -> password accepted on the SASL listener."""

_JAAS_KEY = "listener.name.sasl_plaintext.plain.sasl.jaas.config"


def _jaas(users: dict[str, str]) -> str:
    """The listener's JAAS line (``=`` escaped for a properties file) accepting ``users``."""
    accepted = " ".join(f'user_{name}\\="{password}"' for name, password in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {accepted};"


class SaslKafka(LocalKafka):
    """:class:`LocalKafka` with a second client listener, SASL_PLAINTEXT with mechanism PLAIN, at
    :attr:`sasl_bootstrap` (the PLAINTEXT one stays, for the broker's own traffic)."""

    sasl_port = 0

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL listener's address (known once :meth:`up` returned)."""
        return f"127.0.0.1:{self.sasl_port}"

    def _write_config(self, port: int, controller_port: int) -> Path:
        path = super()._write_config(port, controller_port)
        (self.sasl_port,) = free_ports(1)
        sasl = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        extend = {
            "listeners": f",{sasl}",
            "advertised.listeners": f",{sasl}",
            "listener.security.protocol.map": ",SASL_PLAINTEXT:SASL_PLAINTEXT",
        }
        lines = []
        for line in path.read_text(encoding="ascii").splitlines():
            key, _, value = line.partition("=")
            lines.append(f"{key}={value}{extend.get(key, '')}")
        lines += ["sasl.enabled.mechanisms=PLAIN", f"{_JAAS_KEY}={_jaas(USERS)}"]
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        return path


def client_properties(user: str = "alice", password: str | None = None) -> dict[str, str]:
    """The ``[kafka.client]`` properties that log in as ``user`` (with its password, or
    ``password``) on the SASL listener."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user] if password is None else password,
    }


class AclKafka(SaslKafka):
    """:class:`SaslKafka` with Kafka's StandardAuthorizer: the PLAINTEXT listener's principal
    (the broker's own traffic, the controller, a test's administration) is a super user and a
    resource without ACLs stays open to everyone, so a DENY ACL takes one right from one SASL
    user while everything else works as on an open broker."""

    def _write_config(self, port: int, controller_port: int) -> Path:
        path = super()._write_config(port, controller_port)
        acl = [
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=true",
        ]
        with path.open("a", encoding="ascii") as config:
            config.write("\n".join(acl) + "\n")
        return path
