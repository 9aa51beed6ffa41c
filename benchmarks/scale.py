"""Scale (issue 26): ingest and search at 10k, 100k and 1M turns, SQLite and PostgreSQL + pgvector side by side.

    python benchmarks/scale.py --sizes 10000,100000 --stores sqlite,postgres --out bench-out/scale-100k.json
    python benchmarks/scale.py --sizes 1000000 --stores postgres,sqlite --out bench-out/scale-1m.json
    python benchmarks/scale.py --vectors minilm --sizes 100000 --stores postgres --engines dense  # validation

Turns: LoCoMo's 5,882 turns (locomo/locomo10.json under the datasets setting or --datasets DIR, read in place)
repeated under new ids t0, t1, …; copy 0 is LoCoMo verbatim, every later copy replaces each word of the turn, with
probability 0.2, by a word drawn from LoCoMo's own word distribution (one `random.Random(26)` stream in turn order,
so turn i is the same at every size). Speaker, date and image caption are kept.

--turns lme instead takes the first N distinct sentences of LongMemEval-S (benchmarks/hnsw_real.py: every message
split at sentence ends, at least 3 words, in order of first appearance; speaker = the message's role, timestamp and
session = its session's), with --vectors minilm read from hnsw_real.py's cache (real MiniLM of each sentence), and
LongMemEval-S's distinct questions split the same way: real, distinct text at every size, for the 1M figures.

Queries: LoCoMo's 1,974 distinct questions, split by the first byte of blake2b(question) into dev (even, 983) and
test (odd, 991). Latency is measured on a fixed sample of test questions; HNSW's ef_search is chosen on dev
recall and reported on test recall.

Vectors (--vectors):
  minilm-perturbed (default): each of LoCoMo's 5,882 turn documents and every query is embedded for real with the
    shipped all-MiniLM-L6-v2 (384 dimensions). A turn whose document is not an original's gets its original's
    MiniLM vector plus Gaussian noise (numpy default_rng((26, i)) for turn i, the first turn carrying that
    document), renormalised; the noise scale sigma = sqrt(1/c**2 - 1)/sqrt(384) puts the cosine between a copy and
    its original at about c = --copy-cosine (the measured distribution is reported). A copy whose words all
    survived has its original's document, hence its original's vector, as a real embedder would give it.
    Queries go through real MiniLM at search time (Memory.search embeds them), so latency includes it.
  minilm: real MiniLM of every turn's document (cached under --data; ~450 turns/s on 2 free cores), to validate
    the construction's HNSW recall at sizes where that is affordable.
  hashing: cuemem's model-free HashingEmbedder (512 dimensions, sparse): the first run's vectors.

Every phase runs in its own subprocess (peak RSS is its own; a search phase is a fresh process, so its first query
pays the loads: the in-process BM25 index, the structure table, the SQLite vector matrix; MiniLM is loaded before
it and timed apart). PostgreSQL comes from `pgserver` (a fresh cluster under --data), its settings are recorded.
Data lives under --data (default /tmp).

Paths: at sizes <= --add-limit turns are ingested by `Memory.add` in calls of 256 turns (the hybrid engine, its
default engine batch): that is the ingest figure. Larger stores are bulk-loaded with the store's own methods
(append_turns, put_items, put_vectors) in batches of --bulk turns, writing what the hybrid engine writes, with
PostgreSQL's automatic HNSW build switched off during the load; the HNSW index is then built by
`PostgresStore.build_vector_index` as its own timed phase (with maintenance_work_mem set so the graph fits in
memory). The bm25 and dense engines share the hybrid engine's items and vectors, so their watermarks are set to the
log's end after the load instead of re-reading the log.

Recall (PostgreSQL): the truth is exact cosine top-k in numpy over every vector read back from the store (checked
against the store's own exact search on the first --exact-checks queries); the store's search (HNSW) is run at
each hnsw.ef_search in --ef-sweep, for k=10 at ef and for k=100 at max(ef, 200), the ef the store uses for
k=100 (hybrid reads the dense ranking 100 deep). A hit counts when its score reaches the exact k-th score (ties
among identical vectors are not misses); id_recall counts ids only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_paths import add_datasets_option, apply_datasets_option
from perf import source_turns
from scale_data import CONFIG, EF_SWEEP, REPLACE, SEED, dims, make_embedder, noise_sigma
from scale_phases import phase_bulk, phase_dupcheck, phase_fts, phase_hnsw, phase_load, phase_recall, phase_search


def run_phase(*args: str) -> dict:
    flags = [
        "--vectors",
        CONFIG["vectors"],
        "--copy-cosine",
        str(CONFIG["cosine"]),
        "--copy-spread",
        str(CONFIG["spread"]),
        "--data",
        str(CONFIG["data"]),
        "--hnsw-m",
        str(CONFIG.get("hnsw_m") or 0),
        "--hnsw-ef-construction",
        str(CONFIG.get("hnsw_ef_construction") or 0),
        "--turns",
        CONFIG["turns"],
        "--lme-cache",
        str(CONFIG["lme_cache"]),
    ]
    cmd = [sys.executable, __file__, *flags, "--phase", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_postgres(root: Path, shared_buffers: str) -> tuple[Any, dict]:
    """A pgserver cluster under root with shared_buffers set (ALTER SYSTEM, then a restart); its versions and
    settings."""
    import pgserver
    import psycopg

    server = pgserver.get_server(root, cleanup_mode="stop")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        if conn.execute("SHOW shared_buffers").fetchone()[0] != shared_buffers:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
            conn.execute("ALTER SYSTEM SET effective_cache_size = '8GB'")
            restart = True
        else:
            restart = False
    if restart:
        server.cleanup()
        server = pgserver.get_server(root, cleanup_mode="stop")
    info: dict = {}
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        info["version"] = conn.execute("SELECT version()").fetchone()[0]
        info["pgvector"] = conn.execute(
            "SELECT default_version FROM pg_available_extensions WHERE name='vector'"
        ).fetchone()[0]
        for name in (
            "shared_buffers",
            "effective_cache_size",
            "work_mem",
            "maintenance_work_mem",
            "max_parallel_workers_per_gather",
            "max_parallel_maintenance_workers",
            "synchronous_commit",
            "fsync",
            "max_wal_size",
        ):
            info[name] = conn.execute(f"SHOW {name}").fetchone()[0]
    return server, info


def database(server: Any, name: str) -> str:
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.get_uri().replace("/postgres?", f"/{name}?", 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--engines", default="bm25,dense,hybrid")
    parser.add_argument("--vectors", default=CONFIG["vectors"], choices=("minilm-perturbed", "minilm", "hashing"))
    parser.add_argument(
        "--turns",
        default="locomo",
        choices=("locomo", "lme"),
        help="lme: distinct LongMemEval-S sentences with their real MiniLM (needs --vectors minilm)",
    )
    parser.add_argument("--lme-cache", default=str(CONFIG["lme_cache"]), help="hnsw_real.py's vector chunks")
    parser.add_argument("--copy-cosine", type=float, default=CONFIG["cosine"], help="minilm-perturbed's target")
    parser.add_argument("--hnsw-m", type=int, default=0, help="--dupcheck only: HNSW m (0: the store's)")
    parser.add_argument("--hnsw-ef-construction", type=int, default=0, help="--dupcheck only (0: the store's)")
    parser.add_argument(
        "--copy-spread",
        type=float,
        default=0.0,
        help="sd of each copy's own target cosine (0: every copy at --copy-cosine; real MiniLM copies"
        " measured sd 0.077)",
    )
    parser.add_argument("--queries", type=int, default=200, help="test questions timed per engine")
    parser.add_argument("--recall-queries", type=int, default=200, help="dev and test questions each, for recall")
    parser.add_argument("--ef-sweep", default=EF_SWEEP, help="hnsw.ef_search values for recall (PostgreSQL)")
    parser.add_argument("--exact-checks", type=int, default=20, help="queries checked against the store's exact")
    parser.add_argument("--add-limit", type=int, default=10000, help="largest size ingested by 256-turn adds")
    parser.add_argument("--bulk", type=int, default=10000, help="turns per add call (and engine batch) above it")
    parser.add_argument("--maintenance-work-mem", default="6GB", help="for the HNSW build")
    parser.add_argument("--shared-buffers", default="4GB")
    parser.add_argument("--fts", action="store_true", help="also measure PostgreSQL full text (side experiment)")
    parser.add_argument(
        "--dupcheck",
        type=int,
        default=0,
        metavar="N",
        help="side experiment: HNSW recall, N vectors, none identical (plain table)",
    )
    parser.add_argument("--keep", action="store_true", help="keep each size's stores (else dropped after it)")
    parser.add_argument("--data", default="/tmp/cuemem-scale")
    parser.add_argument("--out", default="bench-out/scale.json")
    parser.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    add_datasets_option(parser)
    args = parser.parse_args()
    apply_datasets_option(args)
    CONFIG.update(
        vectors=args.vectors,
        cosine=args.copy_cosine,
        spread=args.copy_spread,
        data=Path(args.data),
        hnsw_m=args.hnsw_m,
        hnsw_ef_construction=args.hnsw_ef_construction,
        turns=args.turns,
        lme_cache=Path(args.lme_cache),
    )
    if args.turns == "lme" and args.vectors != "minilm":
        parser.error("--turns lme needs --vectors minilm (its vectors are real MiniLM of every sentence)")

    if args.phase:
        name, *rest = args.phase
        if name == "bulk":
            result = phase_bulk(rest[0], int(rest[1]), int(rest[2]))
        elif name == "load":
            result = phase_load(rest[0], int(rest[1]), int(rest[2]), rest[3] == "bulk")
        elif name == "hnsw":
            result = phase_hnsw(rest[0], rest[1])
        elif name == "search":
            result = phase_search(rest[0], rest[1], int(rest[2]))
        elif name == "dupcheck":
            result = phase_dupcheck(rest[0], int(rest[1]), int(rest[2]), rest[3], rest[4])
        elif name == "recall":
            result = phase_recall(rest[0], int(rest[1]), rest[2], int(rest[3]))
        else:
            result = phase_fts(rest[0], int(rest[1]))
        print(json.dumps(result))
        return

    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    stores = args.stores.split(",")
    out = Path(args.out)
    report: dict = {
        "machine": {
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "ram_gb": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "turns": f"LoCoMo ({len(source_turns()[0])} turns) then copies with p={REPLACE} word replacement, seed {SEED}"
        if args.turns == "locomo"
        else "the first N distinct LongMemEval-S sentences (benchmarks/hnsw_real.py)",
        "vectors": args.vectors,
        "embedder": make_embedder().name,
        "dims": dims(),
        "queries": args.queries,
        "split": "dev/test by blake2b(question)[0] % 2"
        + (" (983 dev, 991 test)" if args.turns == "locomo" else " of LongMemEval-S's distinct questions"),
        "runs": [],
    }
    if args.vectors == "minilm-perturbed":
        report["copy_cosine_target"] = args.copy_cosine
        report["noise_sigma"] = noise_sigma(args.copy_cosine)
    server = None
    if "postgres" in stores:
        server, report["postgres"] = start_postgres(data / "pg", args.shared_buffers)
        from cuemem.store import postgres

        report["postgres"]["hnsw"] = {
            "m": postgres.HNSW_M,
            "ef_construction": postgres.HNSW_EF_CONSTRUCTION,
            "ef_search": postgres.HNSW_EF_SEARCH,
            "threshold": postgres.HNSW_THRESHOLD,
        }
        print(json.dumps(report["postgres"]), flush=True)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))

    if args.dupcheck:
        target = database(server, "scale_dupcheck")
        report["dupcheck"] = run_phase(
            "dupcheck", target, str(args.dupcheck), str(args.recall_queries), args.ef_sweep, args.maintenance_work_mem
        )
        print(json.dumps(report["dupcheck"]), flush=True)
        _drop("postgres", target, server)
        save()
        return
    for size in [int(s) for s in args.sizes.split(",")]:
        for kind in stores:
            if kind == "postgres":
                target = database(server, f"scale_{size}")
            else:
                target = str(data / f"scale_{size}.db")
                for suffix in ("", "-wal", "-shm"):
                    Path(target + suffix).unlink(missing_ok=True)
            run: dict = {"store": kind, "turns": size}
            report["runs"].append(run)
            bulk = size > args.add_limit
            if bulk:
                load = run_phase("bulk", target, str(size), str(args.bulk))
            else:
                load = run_phase("load", target, str(size), "256", "add")
            run["load"] = load
            print(
                f"{kind:8s} {size:>8} load ({load['path']}): {load['seconds']:.1f} s = {load['turns_per_s']:.0f}"
                f" turns/s, {load['unique_texts']} unique texts, peak {load['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            if kind == "postgres" and size >= report["postgres"]["hnsw"]["threshold"]:
                run["hnsw"] = run_phase("hnsw", target, args.maintenance_work_mem)
                print(
                    f"{kind:8s} {size:>8} HNSW build {run['hnsw']['seconds']:.1f} s, {run['hnsw']['index_mb']:.0f} MB",
                    flush=True,
                )
            run["store_mb"] = _store_mb(target, server)
            save()
            run["search"] = []
            for engine in [e for e in args.engines.split(",") if e]:
                r = run_phase("search", target, engine, str(args.queries))
                run["search"].append(r)
                print(
                    f"{kind:8s} {size:>8} {engine:7s} p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms"
                    f"  first {r['first_query_ms']:8.0f} ms (+{r['first_query_rss_mb']:.0f} MB)"
                    f"  peak {r['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
                save()
            if kind == "postgres" and args.recall_queries:
                rec = run["recall"] = run_phase(
                    "recall", target, str(args.recall_queries), args.ef_sweep, str(args.exact_checks)
                )
                for ef, row in rec["sweep"].items():
                    print(
                        f"{kind:8s} {size:>8} ef_search {ef:>4}: "
                        + "  ".join(
                            f"{split} r@10 {r['recall@10']:.3f} r@100 {r['recall@100']:.3f}"
                            f" p50 {r['p50_ms@10']:.1f}/{r['p50_ms@100']:.1f} ms"
                            for split, r in row.items()
                        ),
                        flush=True,
                    )
                print(
                    f"{kind:8s} {size:>8} chosen ef_search {rec['chosen_ef']} (hnsw {rec['hnsw']},"
                    f" exact check {rec.get('exact_check')})",
                    flush=True,
                )
                save()
            if kind == "postgres" and args.fts:
                run["fts"] = run_phase("fts", target, str(args.queries))
                print(f"{kind:8s} {size:>8} tsvector/GIN: {json.dumps(run['fts'])}", flush=True)
                save()
            if not args.keep:
                _drop(kind, target, server)
    save()
    print(markdown(report))
    print(f"wrote {out}")


def _store_mb(target: str, server: Any) -> float:
    if server is not None and "://" in target:
        import psycopg

        with psycopg.connect(target) as conn:
            return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20
    return sum(Path(p).stat().st_size for p in (target, target + "-wal") if Path(p).exists()) / 2**20


def _drop(kind: str, target: str, server: Any) -> None:
    if kind == "postgres":
        import psycopg

        name = target.split("?")[0].rsplit("/", 1)[1]
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(target + suffix).unlink(missing_ok=True)


def markdown(report: dict) -> str:
    lines = [
        "| store | turns | load path | load turns/s | HNSW build s / MB | engine | p50 ms | p95 ms | mean ms"
        " | retrieval-only p50 / p95 ms | first query ms | first-query RSS MB | peak RSS MB |",
        "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        load = run["load"]
        hnsw = f"{run['hnsw']['seconds']:.0f} / {run['hnsw']['index_mb']:.0f}" if "hnsw" in run else "-"
        for r in run.get("search", []):
            ret = f"{r['retrieval']['p50_ms']:.1f} / {r['retrieval']['p95_ms']:.1f}" if "retrieval" in r else "-"
            lines.append(
                f"| {run['store']} | {run['turns']:,} | {load['path']} | {load['turns_per_s']:,.0f} | {hnsw}"
                f" | {r['engine']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['mean_ms']:.1f} | {ret}"
                f" | {r['first_query_ms']:,.0f} | {r['first_query_rss_mb']:,.0f} | {r['peak_rss_mb']:,.0f} |"
            )
    lines += [
        "",
        "| turns | HNSW | ef_search | dev recall@10 | dev recall@100 | test recall@10 | test recall@100"
        " | test min recall@10 | test p50/p95 ms k=10 | test p50/p95 ms k=100 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in report["runs"]:
        rec = run.get("recall")
        if not rec:
            continue
        for ef, row in rec["sweep"].items():
            dev, test = row["dev"], row["test"]
            mark = " (chosen)" if str(ef) == str(rec["chosen_ef"]) else ""
            lines.append(
                f"| {run['turns']:,} | {rec['hnsw']} | {ef}{mark} | {dev['recall@10']:.3f} | {dev['recall@100']:.3f}"
                f" | {test['recall@10']:.3f} | {test['recall@100']:.3f} | {test['min_recall@10']:.2f}"
                f" | {test['p50_ms@10']:.1f} / {test['p95_ms@10']:.1f}"
                f" | {test['p50_ms@100']:.1f} / {test['p95_ms@100']:.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
