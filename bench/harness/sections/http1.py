"""HTTP/1.1 (wrk): nginx, the gateway's public route, its signed-in route and its
bearer-token route (a machine caller's), alternating;
then the memory of idle keep-alive connections to nginx and the gateway."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from .. import bearer, mcp
from ..fmt import fmt, fmt_paired, fmt_rss, verdict
from ..gateway import AUTH_USER, POLICY_HOST, AuthProvider, start_gateway
from ..idle import idle_memory
from ..load import CONNECTIONS, Bench, Target
from ..nginx import BODY_LEN
from ..otlp_sink import OtlpSink
from ..probes import check_body
from ..procs import Processes, wait_port
from ..sample import status_kib
from ..signin import sign_in

# The issue's targets, printed beside the figures (never used to fail the run).
TARGET_RATIO = 0.20
# authenticated route: the public route's target ratio minus at most 20 %
TARGET_AUTH_RATIO = round(TARGET_RATIO * 0.8, 4)
TARGET_P99_MS = 15.0
TARGET_IDLE_KIB = 30.0
TARGET_POLICY_RATIO = 0.90  # issue 30: within 10 % of the signed-in route
TARGET_BEARER_RATIO = 0.85  # issue 42: a bearer-token route within 15 % of it


def run_section(args: argparse.Namespace, bench: Bench, procs: Processes, tmp: Path,
                twistd: Path, up_port: int, gw_port: int, nginx: Target,
                provider: AuthProvider | None, results: dict[str, Any]) -> None:
    """The gateway (with the signed-in route when ``provider`` runs) on ``gw_port``, its
    rows and nginx's in ``results["http1"]``, the idle connections in ``results["idle"]``;
    the gateway is stopped at the end."""
    with_mcp = provider is not None and not getattr(args, "no_mcp", False)
    gateway, gw_port = start_gateway(procs, tmp, twistd, "gateway", up_port, None,
                                     bench.proxy_cpu, port=gw_port, auth=provider,
                                     metrics=args.metrics, with_mcp=with_mcp)
    wait_port(gw_port, gateway)
    gw = Target("gateway", gw_port, lambda: [gateway.pid])
    results["gateway_check"] = check_body(gw_port)

    targets = [nginx, gw]
    otlp_gateway = None
    sink = None
    if getattr(args, "otlp", False):
        # the same public route in a second process tracing over OTLP at the default
        # sample rate (tracing_sample_rate 0.0001): what turning it on costs
        sink = OtlpSink().__enter__()
        otlp_gateway, otlp_port = start_gateway(
            procs, tmp, twistd, "gateway-otlp", up_port, None, bench.proxy_cpu,
            extra=("tracing_provider: otlp",
                   f"otel_exporter_otlp_endpoint: http://127.0.0.1:{sink.port}"))
        wait_port(otlp_port, otlp_gateway)
        results["gateway_otlp_check"] = check_body(otlp_port)
        targets.append(Target("gateway otlp", otlp_port, lambda: [otlp_gateway.pid]))
    auth_headers: dict[str, str] = {}
    if provider is not None:
        try:
            session = sign_in(gw_port)
            headers = {"Host": session["host"], "Cookie": session["cookie"]}
            results["auth"]["check"] = check_body(gw_port, headers)
            auth_headers = headers
            results["auth"].update({k: v for k, v in session.items() if k != "cookie"})
            print(f"authenticated route: signed in as {AUTH_USER} in "
                  f"{session['sign_in_seconds']:.1f} s, cookie {session['cookie_names']} "
                  f"({session['cookie_bytes']} bytes); GET http://{session['host']}/ -> 200",
                  flush=True)
            targets.append(Target("gateway auth", gw_port, gw.pids,
                                  tuple(f"{k}: {v}" for k, v in headers.items())))
            # a machine caller: the same kind of route, a bearer token instead of a
            # session cookie (issue 42: within 15 % of the cookie row)
            token = {"Host": f"{bearer.BEARER_HOST}:{gw_port}",
                     "Authorization": f"Bearer {bearer.token()}"}
            results["auth"]["bearer_check"] = check_body(gw_port, token)
            targets.append(Target("gateway bearer", gw_port, gw.pids,
                                  tuple(f"{k}: {v}" for k, v in token.items())))
            policy = {"Host": f"{POLICY_HOST}:{gw_port}", "Cookie": session["cookie"]}
            results["auth"]["policy_check"] = check_body(gw_port, policy)
            targets.append(Target("gateway policy", gw_port, gw.pids,
                                  tuple(f"{k}: {v}" for k, v in policy.items())))
        except Exception as exc:
            results["auth"]["error"] = f"{type(exc).__name__}: {exc}"
            print(f"authenticated route: ERROR, section aborted: {results['auth']['error']}",
                  flush=True)

    keys = ("rps", "p50_ms", "p75_ms", "p90_ms", "p99_ms")
    print("HTTP/1.1 load (wrk)", flush=True)
    results["http1"].update(bench.interleaved(targets, bench.wrk, keys))
    if auth_headers:
        try:  # the session still holds after the runs (wrk does not tell 3xx from 2xx)
            check_body(gw_port, auth_headers)
            results["auth"]["check_after"] = "200"
        except RuntimeError as exc:
            results["auth"]["error"] = f"after the runs: {exc}"
    if with_mcp and auth_headers:
        mcp_rows(bench, tmp, gw_port, gw, auth_headers, results, keys)
    results["gateway_vmhwm_kib"] = status_kib(gateway.pid, "VmHWM")
    if otlp_gateway is not None and sink is not None:
        procs.stop(otlp_gateway)
        results["otlp_sink"] = {"requests": sink.requests, "bytes": sink.bytes}
        sink.__exit__(None, None, None)

    if args.idle_connections:
        print(f"Idle keep-alive connections ({args.idle_connections})", flush=True)
        for target in (nginx, gw):
            try:
                results["idle"][target.name] = idle_memory(
                    target.name, target.port, target.pids, args.idle_connections,
                    args.idle_timeout, args.idle_path)
            except OSError as exc:
                results["idle"][target.name] = {"error": str(exc)}
    procs.stop(gateway)


def mcp_rows(bench: Bench, tmp: Path, gw_port: int, gw: Target, session: dict[str, str],
             results: dict[str, Any], keys: tuple[str, ...]) -> None:
    """The MCP route's ``tools/call`` and the same POST on a plain signed-in route
    (``harness/mcp.py``), alternating on their own, right after the token is issued (an
    access token lives five minutes)."""
    info = results.setdefault("mcp", {})
    try:
        got = mcp.token(gw_port, AUTH_USER)
        info.update(client_id=got["client_id"], token_seconds=got["seconds"])
        mcp_headers = {"Host": f"{mcp.MCP_HOST}:{gw_port}",
                       "Authorization": f"Bearer {got['access_token']}"}
        plain_headers = {"Host": f"{mcp.PLAIN_HOST}:{gw_port}", "Cookie": session["Cookie"]}
        info["check"] = mcp.check_post(gw_port, mcp_headers, BODY_LEN)
        info["plain_check"] = mcp.check_post(gw_port, plain_headers, BODY_LEN)
        print(f"MCP route: token issued in {got['seconds']:.1f} s; POST tools/call -> 200",
              flush=True)
        script = str(mcp.wrk_script(tmp))
        targets = [
            Target("gateway plain", gw_port, gw.pids,
                   tuple(f"{k}: {v}" for k, v in plain_headers.items()), script=script),
            Target("gateway mcp", gw_port, gw.pids,
                   tuple(f"{k}: {v}" for k, v in mcp_headers.items()), script=script)]
        print("MCP tools/call vs. the same POST on a signed-in route (wrk)", flush=True)
        results["http1"].update(bench.interleaved(targets, bench.wrk, keys))
        info["check_after"] = mcp.check_post(gw_port, mcp_headers, BODY_LEN)
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
        print(f"MCP rows: ERROR: {info['error']}", flush=True)


def report(results: dict[str, Any], out: TextIO) -> None:
    http1 = results.get("http1", {})
    w = out.write
    w("\n")
    w(f"HTTP/1.1, wrk -t1 -c{CONNECTIONS}, {results['config']['duration']:g} s runs, median of "
      f"{results['config']['repeat']}; {results['config']['pinning']}\n")
    header = f"{'target':<14} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'peak RSS':>10} " \
             f"{'proxy CPU':>10} {'wrk+up CPU':>11} {'clean':>6}\n"
    w(header)
    w("-" * (len(header) - 1) + "\n")
    for name, r in http1.items():
        m = r.get("median", {})
        clean = f"{r.get('clean_runs', 0)}/{r.get('used_runs', 0)}"
        w(f"{name:<14} {fmt(m.get('rps'), ',.0f'):>9} {fmt(m.get('p50_ms'), '.2f'):>8} "
          f"{fmt(m.get('p99_ms'), '.2f'):>8} {fmt_rss(r.get('peak_rss_kib')):>10} "
          f"{fmt(m.get('proxy_cpu%'), '.0f') + ' %':>10} "
          f"{fmt(m.get('load_upstream_cpu%'), '.0f') + ' %':>11} {clean:>6}\n")
    for name, r in http1.items():
        runs = r.get("attempts", [])
        bad = sum(x.get("non_2xx_3xx", 0) for x in runs)
        small = [x["bytes_per_response"] for x in runs
                 if x.get("bytes_per_response", BODY_LEN) < BODY_LEN]
        errors = [x["socket_errors"] for x in runs if x.get("socket_errors")]
        if bad or small or errors:
            w(f"  warning: {name}: {bad} non-2xx/3xx responses"
              + (f", runs averaging {small} bytes per response (< the {BODY_LEN}-byte body: "
                 "redirects or error pages, not the upstream)" if small else "")
              + (f", socket errors {errors}" if errors else "") + "\n")
    gw, ng = http1.get("gateway", {}).get("median", {}), http1.get("nginx", {}).get("median", {})
    au = http1.get("gateway auth", {}).get("median", {})
    if gw.get("rps") and ng.get("rps"):
        ratio = gw["rps"] / ng["rps"]
        results["ratio_gateway_nginx"] = ratio
        w(f"gateway/nginx req/s: {ratio:.3f}   (target >= {TARGET_RATIO:.2f}: "
          f"{verdict(ratio >= TARGET_RATIO)}){fmt_paired(http1.get('gateway', {}))}\n")
    if au.get("rps") and ng.get("rps"):
        ratio = au["rps"] / ng["rps"]
        results["ratio_gateway_auth_nginx"] = ratio
        w(f"gateway auth/nginx req/s: {ratio:.3f}   (target >= {TARGET_AUTH_RATIO:.2f}, the "
          f"public target {TARGET_RATIO:.2f} - 20 %: {verdict(ratio >= TARGET_AUTH_RATIO)})"
          f"{fmt_paired(http1.get('gateway auth', {}))}\n")
    be = http1.get("gateway bearer", {}).get("median", {})
    if be.get("rps") and au.get("rps"):
        ratio = be["rps"] / au["rps"]
        results["ratio_gateway_bearer_auth"] = ratio
        w(f"gateway bearer/gateway auth req/s: {ratio:.3f}   (a bearer JWT from an outside "
          f"issuer vs. a session cookie, the same kind of route; target >= "
          f"{TARGET_BEARER_RATIO:.2f}: {verdict(ratio >= TARGET_BEARER_RATIO)})"
          f"{fmt_paired(http1.get('gateway bearer', {}))}\n")
        if be.get("proxy_cpu%") and au.get("proxy_cpu%"):
            # the proxy's CPU per request: what a loaded machine disturbs least
            cpu = {k: m["proxy_cpu%"] / 100 / m["rps"] * 1e6 for k, m in (("bearer", be),
                                                                            ("auth", au))}
            results["cpu_us_per_request_bearer_auth"] = cpu
            w(f"  proxy CPU per request: bearer {cpu['bearer']:.0f} µs, cookie "
              f"{cpu['auth']:.0f} µs (ratio {cpu['auth'] / cpu['bearer']:.3f})\n")
    po = http1.get("gateway policy", {}).get("median", {})
    if po.get("rps") and au.get("rps"):
        ratio = po["rps"] / au["rps"]
        results["ratio_gateway_policy_auth"] = ratio
        w(f"gateway policy/gateway auth req/s: {ratio:.3f}   (a 10-criterion policy read per "
          f"request vs. allowed_users; target >= {TARGET_POLICY_RATIO:.2f}: "
          f"{verdict(ratio >= TARGET_POLICY_RATIO)})"
          f"{fmt_paired(http1.get('gateway policy', {}))}\n")
    mc, pl = (http1.get("gateway mcp", {}).get("median", {}),
              http1.get("gateway plain", {}).get("median", {}))
    if mc.get("rps") and pl.get("rps"):
        ratio = mc["rps"] / pl["rps"]
        results["ratio_gateway_mcp_plain"] = ratio
        w(f"gateway mcp/gateway plain req/s: {ratio:.3f}   (a JSON-RPC tools/call with a "
          "bearer token through MCP policy (body read, decided, forwarded) vs. the same POST "
          f"with a session cookie on a signed-in route){fmt_paired(http1.get('gateway mcp', {}))}"
          "\n")
        if mc.get("proxy_cpu%") and pl.get("proxy_cpu%"):
            cpu = {k: m["proxy_cpu%"] / 100 / m["rps"] * 1e6 for k, m in (("mcp", mc),
                                                                            ("plain", pl))}
            results["cpu_us_per_request_mcp_plain"] = cpu
            w(f"  proxy CPU per request: mcp {cpu['mcp']:.0f} µs, plain {cpu['plain']:.0f} µs "
              f"(ratio {cpu['plain'] / cpu['mcp']:.3f})\n")
    if "error" in results.get("mcp", {}):
        w(f"gateway mcp: ERROR: {results['mcp']['error']}\n")
    ot = http1.get("gateway otlp", {}).get("median", {})
    if ot.get("rps") and gw.get("rps"):
        ratio = ot["rps"] / gw["rps"]
        results["ratio_gateway_otlp_public"] = ratio
        sink = results.get("otlp_sink", {})
        pairs = [round(x["rps"] / y["rps"], 3) for x, y in zip(
            http1["gateway otlp"].get("attempts", []), http1["gateway"].get("attempts", []),
            strict=False) if x.get("clean") and y.get("clean") and y.get("rps")]
        results["paired_gateway_otlp_public"] = pairs
        w(f"gateway otlp/gateway req/s: {ratio:.3f}   (tracing over OTLP/HTTP at the default "
          f"sample rate vs. tracing off, two processes; the sink got "
          f"{sink.get('requests', 0)} exports){fmt_paired({'paired': pairs})}\n")
    if au.get("rps") and gw.get("rps"):
        ratio = au["rps"] / gw["rps"]
        results["ratio_gateway_auth_public"] = ratio
        w(f"gateway auth/gateway req/s: {ratio:.3f}   (authenticated vs. public route, same "
          "process)\n")
    auth = results.get("auth", {})
    if "skipped" in auth:
        w(f"gateway auth: skipped: {auth['skipped']}\n")
    elif "error" in auth:
        w(f"gateway auth: ERROR: {auth['error']}\n")
    if gw.get("p99_ms") is not None:
        w(f"gateway p99 at c={CONNECTIONS}: {gw['p99_ms']:.2f} ms   (target <= "
          f"{TARGET_P99_MS:g} ms: {verdict(gw['p99_ms'] <= TARGET_P99_MS)})\n")
    w(f"\nIdle HTTP/1.1 keep-alive connections (one GET {results['config']['idle_path']} each), "
      "(RSS after - before) / n:\n")
    for name, r in results.get("idle", {}).items():
        per = r.get("kib_per_connection")
        extra = f", {r['still_open_at_measurement']} still open" if "opened" in r else ""
        line = f"  {name:<12} {fmt(per, '.2f'):>7} KiB/conn  ({r.get('opened', 0)}/" \
               f"{r.get('requested', 0)} opened{extra}"
        if r.get("failures"):
            line += f", failures {r['failures']}"
        line += ")"
        if "invalid" in r:
            line += f"   n/a: {r['invalid']}"
            if name == "gateway":
                line += f" (target <= {TARGET_IDLE_KIB:g} KiB: not measured)"
        elif name == "gateway" and per is not None:
            line += f"   (target <= {TARGET_IDLE_KIB:g} KiB: {verdict(per <= TARGET_IDLE_KIB)})"
        elif name == "nginx":
            line += "   (reference)"
        if "error" in r:
            line += f"   error: {r['error']}"
        w(line + "\n")
