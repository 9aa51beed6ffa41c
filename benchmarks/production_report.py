"""The production-like benchmark's report (benchmarks/production.py): a short table and what went wrong."""

from __future__ import annotations

from typing import Any


def table(result: dict[str, Any]) -> str:
    """A short human summary."""
    d = result["sizes"]
    s = result["seed"]
    lines = [
        f"namespaces {d['namespaces']:,}, turns {d['turns']:,}: max {d['max']:,}, p50 {d['p50']}, p90 {d['p90']},"
        f" p99 {d['p99']:,}, >=50k: {d['count_ge_50k']}, <100: {d['count_lt_100']:,}"
        + (" (seed reused)" if s.get("reused") else f" (seeded in {s['seconds']} s, {s['turns_per_s']:,} turns/s)"),
    ]
    for name, first in result["first_answer"].items():
        lines.append(
            f"start to first answer, {name} ({first['user']}, {first['size']:,} turns):"
            f" {first['start_to_first_answer_s']} s"
            f" (healthz {first['start_to_healthz_s']} s, search {first['first_search_ms']} ms, then"
            f" {first['second_search_ms']} ms; RSS {first['rss_after_mb']} MB)"
        )
    load = result.get("load")
    if load:
        lines.append(f"load: {load['servers']} servers, {load['clients']} clients, {load['seconds']} s")
        lines.append("  search ms        p50     p95     p99       n")
        for group in ("hot/first", "hot/warm", "cold/first", "cold/warm", "all"):
            m = load["search_ms"][group]
            lines.append(f"  {group:<12}{m['p50']:>8}{m['p95']:>8}{m['p99']:>8}{m['n']:>8}")
        w = load["write_ms"]
        lines.append(
            f"  writes: {load['acknowledged_writes']:,} acknowledged, {load['acknowledged_writes_per_s']}/s"
            f" (p50 {w['p50']} ms, p95 {w['p95']} ms); searches {load['searches_per_s']}/s"
        )
        peaks = ", ".join(
            f"{k.split('/')[0]} {v.get('vm_hwm_mb', v['peak_rss_mb'])}" for k, v in load["memory_mb"].items()
        )
        lines.append(f"  peak RSS MB (VmHWM) per server life: {peaks}")
        lines.append(
            f"  5xx {load['server_errors_5xx']}, busy retried {load['busy_refusals_retried']},"
            f" failures on live servers {load['connection_failures_on_live_servers']}"
        )
        k, c = load.get("kill9", {}), load["check"]
        if k:
            lines.append(
                f"  kill -9 of server 0 at {k['killed_at_s']} s, restarted in {k['restart_to_healthz_s']} s,"
                f" {k['clients_moved']} clients moved"
            )
        lines.append(
            f"  lost acknowledged {c['lost']}, duplicates {c['duplicates']}, cross-key reads {load['cross_key_reads']}"
        )
    for point in result.get("servers_curve", []):
        lines.append(
            f"write-only, {point['servers']} server(s): {point['acknowledged_writes_per_s']} acknowledged writes/s"
            f" (p50 {point['write_ms']['p50']} ms, p95 {point['write_ms']['p95']} ms,"
            f" busy {point['busy_refusals_retried']},"
            f" 5xx {point['server_errors_5xx']}, lost {point['check']['lost']})"
        )
    return "\n".join(lines)


def problems(result: dict[str, Any]) -> list[str]:
    """What went wrong (empty: nothing)."""
    wrong = []
    for name, phase in [("load", result.get("load"))] + [
        (f"curve-{p['servers']}", p) for p in result.get("servers_curve", [])
    ]:
        if not phase:
            continue
        for key in ("server_errors_5xx", "cross_key_reads", "connection_failures_on_live_servers"):
            if phase[key]:
                wrong.append(f"{name}: {key} {phase[key]}")
        for key in ("lost", "duplicates"):
            if phase["check"][key]:
                wrong.append(f"{name}: {key} {phase['check'][key]}")
        if "kill9" in phase and not phase["kill9"]["responses_after_kill"]:
            wrong.append(f"{name}: no server answered after the kill")
    for name, first in result["first_answer"].items():
        if first["status"] != 200:
            wrong.append(f"first answer {name}: status {first['status']}")
    return wrong
