"""Tomcat 10 and Jetty 9 (Debian's ``tomcat10`` and ``jetty9``) as test upstreams.

Each runs from its package's installation (``/usr/share/tomcat10``, ``/usr/share/jetty9``)
with a base directory of its own under the test's temporary directory, on a free
loopback port, in the foreground under ``ManagedProcess``; the system services are never
used (the packages' units are disabled by ``scripts/setup-dev.sh``'s install, and need
systemd anyway). The one web application, at ``/``, is a tree of static files served by
the container's default servlet: each file's content is its own path without the leading
``/`` (``/private/admin/x`` holds ``private/admin/x``), so a response names the resource
the container mapped the request to.

Recipes, tested with Tomcat 10.1.60 and Jetty 9.4.57 on OpenJDK 17 (each up in about
1.5 s on an idle machine, with ``-XX:TieredStopAtLevel=1 -XX:+UseSerialGC``):

- Tomcat: ``CATALINA_BASE`` holds ``conf/server.xml`` (one HTTP/1.1 connector, no
  shutdown port, one host whose ``appBase`` is ``webapps``), ``conf/web.xml`` and
  ``conf/catalina.properties`` copied from ``/etc/tomcat10`` (the default servlet; the
  class loaders; jar scanning switched off for a faster start), ``webapps/ROOT`` the
  files. Run ``java -cp bin/bootstrap.jar:bin/tomcat-juli.jar -Dcatalina.home=...
  -Dcatalina.base=... org.apache.catalina.startup.Bootstrap start``.
- Jetty: ``jetty.base`` holds ``webapps/root`` (deployed at ``/``). Run ``java -jar
  /usr/share/jetty9/start.jar jetty.home=/usr/share/jetty9 jetty.base=...
  --module=http,deploy jetty.http.host=127.0.0.1 jetty.http.port=PORT``.

What they do with paths (seen directly, without the gateway): both drop ``;params`` from
every segment and merge ``//``; both read ``%3B`` as a literal ``;`` (``/a%3Bx/b`` is a
missing ``a;x`` directory); Jetty serves ``/a%2Fb`` as ``/a/b`` where Tomcat answers 400;
both are case-sensitive and read ``admin.`` as another name than ``admin``.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .processes import ManagedProcess, free_port, http_ok

SERVLET_HINT = "apt-get install -y --no-install-recommends tomcat10 jetty9"
TOMCAT_HOME = Path("/usr/share/tomcat10")
TOMCAT_CONF = Path("/etc/tomcat10")
JETTY_HOME = Path("/usr/share/jetty9")
# a short-lived JVM: the C1 compiler alone and the serial collector start fastest
JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m")


@dataclass(frozen=True)
class Container:
    name: str  # "tomcat" or "jetty"
    url: str
    port: int
    process: ManagedProcess


def missing() -> str | None:
    """What is missing to run both containers, or None."""
    if shutil.which("java") is None:
        return "java"
    for path in (TOMCAT_HOME / "bin" / "bootstrap.jar", TOMCAT_CONF / "web.xml",
                 JETTY_HOME / "start.jar"):
        if not path.exists():
            return str(path)
    return None


def write_tree(root: Path, resources: Sequence[str]) -> None:
    """One file per resource path (``private/admin/x``), holding that path."""
    for resource in resources:
        file = root / resource
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(resource)


@contextlib.contextmanager
def tomcat(tmpdir: Path, resources: Sequence[str], timeout: float = 60.0
           ) -> Iterator[Container]:
    """Tomcat 10 serving ``resources`` (see ``write_tree``) on a free loopback port."""
    base = tmpdir / "tomcat"
    for name in ("conf", "logs", "temp", "work", "webapps/ROOT"):
        (base / name).mkdir(parents=True, exist_ok=True)
    shutil.copy(TOMCAT_CONF / "web.xml", base / "conf" / "web.xml")
    properties = (TOMCAT_CONF / "catalina.properties").read_text()
    (base / "conf" / "catalina.properties").write_text(
        properties + "\ntomcat.util.scan.StandardJarScanFilter.jarsToSkip=*\n")
    port = free_port()
    (base / "conf" / "server.xml").write_text(f"""<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <Service name="Catalina">
    <Connector port="{port}" address="127.0.0.1" protocol="HTTP/1.1"/>
    <Engine name="Catalina" defaultHost="localhost">
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false"/>
    </Engine>
  </Service>
</Server>
""")
    write_tree(base / "webapps" / "ROOT", resources)
    bin_dir = TOMCAT_HOME / "bin"
    classpath = f"{bin_dir / 'bootstrap.jar'}:{bin_dir / 'tomcat-juli.jar'}"
    argv = ["java", *JVM_OPTIONS, "-cp", classpath,
            f"-Dcatalina.home={TOMCAT_HOME}", f"-Dcatalina.base={base}",
            f"-Djava.io.tmpdir={base / 'temp'}",
            "org.apache.catalina.startup.Bootstrap", "start"]
    url = f"http://127.0.0.1:{port}"
    with ManagedProcess(argv, log_dir=tmpdir, name="tomcat", cwd=base) as process:
        process.wait_ready(lambda: http_ok(f"{url}/{resources[0]}"), timeout)
        yield Container("tomcat", url, port, process)


@contextlib.contextmanager
def jetty(tmpdir: Path, resources: Sequence[str], timeout: float = 60.0
          ) -> Iterator[Container]:
    """Jetty 9 serving ``resources`` (see ``write_tree``) on a free loopback port."""
    base = tmpdir / "jetty"
    write_tree(base / "webapps" / "root", resources)
    port = free_port()
    argv = ["java", *JVM_OPTIONS, f"-Djava.io.tmpdir={tmpdir}", "-jar",
            str(JETTY_HOME / "start.jar"), f"jetty.home={JETTY_HOME}", f"jetty.base={base}",
            "--module=http,deploy", "jetty.http.host=127.0.0.1", f"jetty.http.port={port}"]
    url = f"http://127.0.0.1:{port}"
    with ManagedProcess(argv, log_dir=tmpdir, name="jetty", cwd=base) as process:
        process.wait_ready(lambda: http_ok(f"{url}/{resources[0]}"), timeout)
        yield Container("jetty", url, port, process)
