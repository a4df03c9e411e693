"""A real Redis Cluster on loopback: 3 masters (optionally with one replica each), made
with ``redis-cli --cluster create``, stopped by PID on exit.

Every node also gets an explicit cluster bus port (``--cluster-port``), so free ports
above 55535 work. Admin commands of the tests go over each node's plain port with the
blocking :class:`RespClient`; in a TLS cluster (``tls_dir``) clients use the TLS ports
(``ClusterNode.port``) and the cluster bus, replication and ``MIGRATE`` use TLS too.

Blocking: call the helpers from the test thread before the reactor runs, or from a
thread (``deferToThread``) while it runs.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import trustme

from tests.support.peers import (
    REDIS_INSTALL_HINT,
    MissingBinary,
    RedisReplyError,
    RespClient,
    RespReply,
    find_binary,
)
from tests.support.processes import ManagedProcess, free_port, wait_until

ADMIN_PASSWORD = "admin-secret"


@dataclass(frozen=True)
class ClusterNode:
    port: int  # where clients connect (the TLS port in a TLS cluster)
    admin_port: int  # plain port for the tests' admin commands
    process: ManagedProcess

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[ClusterNode, ...]
    username: str | None  # the ACL user for clients, when made with one
    password: str | None
    ca_pem: bytes | None  # the CA of the node certificates in a TLS cluster
    replicas: bool = False

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [n.address for n in self.nodes]

    def command(self, node: ClusterNode, *args: str | bytes | int,
                timeout: float = 5.0) -> RespReply:
        with RespClient("127.0.0.1", node.admin_port, password=self._admin_password,
                        timeout=timeout) as client:
            return client.command(*args)

    @property
    def _admin_password(self) -> str | None:
        return ADMIN_PASSWORD if self.password is not None else None

    def alive(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.process.running]

    def node_id(self, node: ClusterNode) -> str:
        reply = self.command(node, "CLUSTER", "MYID")
        assert isinstance(reply, bytes)
        return reply.decode()

    def role(self, node: ClusterNode) -> str:
        reply = self.command(node, "ROLE")
        assert isinstance(reply, list) and isinstance(reply[0], bytes)
        return reply[0].decode()

    def masters(self) -> list[ClusterNode]:
        return [n for n in self.alive() if self.role(n) == "master"
                and self.slot_ranges(n)]

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        master_id = self.node_id(master)
        for node in self.alive():
            if node is not master and self.role(node) == "slave":
                info = self.command(node, "CLUSTER", "NODES")
                assert isinstance(info, bytes)
                for line in info.decode().splitlines():
                    fields = line.split()
                    if "myself" in fields[2] and fields[3] == master_id:
                        return node
        raise AssertionError(f"no replica of {master.port}")

    def slot_ranges(self, node: ClusterNode) -> list[tuple[int, int]]:
        """The slot ranges ``node`` says it owns itself."""
        info = self.command(node, "CLUSTER", "NODES")
        assert isinstance(info, bytes)
        for line in info.decode().splitlines():
            fields = line.split()
            if "myself" in fields[2] and "master" in fields[2]:
                ranges = []
                for item in fields[8:]:
                    if item.startswith("["):
                        continue  # a slot being migrated or imported
                    start, _, end = item.partition("-")
                    ranges.append((int(start), int(end or start)))
                return ranges
        return []

    def owner(self, slot: int) -> ClusterNode:
        """The master that serves ``slot``, asked of the masters themselves."""
        for node in self.masters():
            if any(start <= slot <= end for start, end in self.slot_ranges(node)):
                return node
        raise AssertionError(f"no master owns slot {slot}")

    def keys_on(self, node: ClusterNode) -> set[str]:
        reply = self.command(node, "KEYS", "*")
        assert isinstance(reply, list)
        return {k.decode() for k in reply if isinstance(k, bytes)}

    def wait_ok(self, timeout: float = 20.0, *, replicas: bool | None = None) -> None:
        """Until every live node says ``cluster_state:ok`` and they all agree which node
        serves every slot; with ``replicas`` (default: when made with replicas) also until
        every master has a replica whose replication link is up."""
        want_replicas = self.replicas if replicas is None else replicas

        def ok() -> bool:
            views = set()
            for node in self.alive():
                info = self.command(node, "CLUSTER", "INFO", timeout=1.0)
                if not isinstance(info, bytes) or b"cluster_state:ok" not in info:
                    return False
                slots = self.command(node, "CLUSTER", "SLOTS", timeout=1.0)
                assert isinstance(slots, list)
                view = sorted((e[0], e[1], e[2][1], len(e) - 3)
                              for e in slots if isinstance(e, list)
                              and isinstance(e[2], list))
                if want_replicas and any(count < 1 for *_, count in view):
                    return False
                if want_replicas and self.role(node) == "slave":
                    replication = self.command(node, "INFO", "replication", timeout=1.0)
                    if (not isinstance(replication, bytes)
                            or b"master_link_status:up" not in replication):
                        return False
                views.add(repr(view))
            return len(views) == 1
        wait_until(ok, timeout, interval=0.1, what="cluster state ok on every node")

    def migrate_slot(self, slot: int, destination: ClusterNode, *,
                     pause: float = 0.0, batch: int = 2) -> None:
        """Move ``slot`` to ``destination`` the way ``redis-cli --cluster reshard`` does:
        IMPORTING/MIGRATING, ``MIGRATE`` the keys ``batch`` at a time (``pause`` s before
        each batch and before the final step, to let traffic run into ASK), then
        ``SETSLOT NODE`` on every master, owners first."""
        source = self.owner(slot)
        assert source is not destination, "the slot is already there"
        source_id, destination_id = self.node_id(source), self.node_id(destination)
        self.command(destination, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        self.command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", destination_id)
        auth: list[str] = (["AUTH", ADMIN_PASSWORD] if self.password is not None else [])
        for _ in range(10_000):
            time.sleep(pause)
            keys = self.command(source, "CLUSTER", "GETKEYSINSLOT", slot, batch)
            assert isinstance(keys, list)
            if not keys:
                break
            self.command(source, "MIGRATE", "127.0.0.1", destination.port, "", 0, 5000,
                         *auth, "KEYS", *[k for k in keys if isinstance(k, bytes)])
        time.sleep(pause)
        others = [n for n in self.masters() if n not in (source, destination)]
        for node in (destination, source, *others):
            self.command(node, "CLUSTER", "SETSLOT", slot, "NODE", destination_id)


def _write_certs(directory: Path) -> tuple[Path, Path, bytes]:
    ca = trustme.CA()
    pem = directory / "node.pem"
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        str(pem))
    ca_path = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    return pem, ca_path, ca.cert_pem.bytes()


@contextlib.contextmanager
def redis_cluster(tmpdir: Path, *, replicas: bool = False,
                  username: str | None = None, password: str | None = None,
                  tls: bool = False, node_timeout_ms: int = 2000,
                  timeout: float = 30.0) -> Iterator[Cluster]:
    """Start 3 masters (+3 replicas with ``replicas``), join them into one cluster and
    wait until it is ok. ``username``/``password`` make an ACL user for clients (the
    admin commands use the default user with :data:`ADMIN_PASSWORD`); ``tls`` serves
    clients, the cluster bus and replication over TLS with a trustme CA."""
    server = find_binary("redis-server")
    cli = find_binary("redis-cli")
    if server is None or cli is None:
        raise MissingBinary("redis-server" if server is None else "redis-cli",
                            REDIS_INSTALL_HINT)
    base = Path(tempfile.mkdtemp(prefix="cluster-", dir=tmpdir))
    common: list[str] = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                         "--daemonize", "no", "--cluster-enabled", "yes",
                         "--cluster-node-timeout", str(node_timeout_ms),
                         "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1"]
    if password is not None:
        common += ["--requirepass", ADMIN_PASSWORD, "--masterauth", ADMIN_PASSWORD,
                   "--user", username or "gateway", "on", f">{password}", "~*", "&*",
                   "+@all"]
    ca_pem = None
    if tls:
        pem, ca_path, ca_pem = _write_certs(base)
        common += ["--tls-cert-file", str(pem), "--tls-key-file", str(pem),
                   "--tls-ca-cert-file", str(ca_path), "--tls-auth-clients", "no",
                   "--tls-cluster", "yes", "--tls-replication", "yes"]
    count = 6 if replicas else 3
    with contextlib.ExitStack() as stack:
        nodes = []
        for i in range(count):
            admin, bus = free_port(), free_port()
            port = free_port() if tls else admin
            data = base / f"node{i}"
            data.mkdir()
            argv = [server, "--port", str(admin), "--cluster-port", str(bus),
                    "--dir", str(data), "--cluster-config-file", str(data / "nodes.conf"),
                    *common]
            if tls:
                argv += ["--tls-port", str(port)]
            process = stack.enter_context(
                ManagedProcess(argv, log_dir=base, name=f"redis-cluster-{admin}"))
            nodes.append(ClusterNode(port, admin, process))
        cluster = Cluster(tuple(nodes), username or ("gateway" if password else None),
                          password, ca_pem, replicas)
        for node in nodes:
            node.process.wait_ready(functools.partial(_pings, cluster, node), timeout)
        create: Sequence[str] = [
            cli, *(["-a", ADMIN_PASSWORD, "--no-auth-warning"] if password else []),
            "--cluster", "create", *(f"127.0.0.1:{n.admin_port}" for n in nodes),
            "--cluster-replicas", "1" if replicas else "0", "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}"
                               f"{done.stderr}")
        cluster.wait_ok(timeout)
        yield cluster


def _pings(cluster: Cluster, node: ClusterNode) -> bool:
    try:
        return cluster.command(node, "PING", timeout=1.0) == "PONG"
    except (OSError, RedisReplyError):
        return False
