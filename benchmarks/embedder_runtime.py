"""EmbeddingGemma on torch vs ONNX Runtime fp32 vs int8 (issue 36 item 4; docs/benchmarks/models.md).

    cuemem models convert embeddinggemma --runtime onnx --quantize none    # the fp32 conversion
    cuemem models convert embeddinggemma --runtime onnx --quantize int8    # the int8 one (the default's)
    python benchmarks/embedder_runtime.py --out bench-out/embedder-runtime.json \\
        --recall torch=bench-out/locomo-dev-torch --recall onnx-int8=bench-out/locomo-dev-onnx

Each runtime runs in a fresh process (`CUEMEM_EMBED_RUNTIME`, `CUEMEM_ONNX_VARIANT`) on 2 threads:
1. load: from the process's first line to the first query vector through `make_embedder` (imports included), with
   the peak RSS at that point and whether torch was imported;
2. throughput: `--turns` LoCoMo dev turn documents (the text dense search embeds) in one `embed` call;
3. cosine of each document vector to torch's.
Then `cuemem search` (the default engine and embedder) on a small store built with the same runtime, timed with
`/usr/bin/time -v` (wall and peak RSS, best of `--repeats`). `--recall NAME=DIR` copies evidence recall@10/@5 of
the dense and hybrid engines from `cuemem bench locomo --split dev --engines dense,hybrid --out DIR` runs. The load
average is recorded with every timing: the machine is shared, rerun when it is high.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RUNTIMES = {
    "torch": {"CUEMEM_EMBED_RUNTIME": "torch"},
    "onnx-fp32": {"CUEMEM_EMBED_RUNTIME": "onnx", "CUEMEM_ONNX_VARIANT": "fp32"},
    "onnx-int8": {"CUEMEM_EMBED_RUNTIME": "onnx", "CUEMEM_ONNX_VARIANT": "int8"},
}
HEAVY = ("torch", "transformers", "sentence_transformers")


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def dev_documents(n: int) -> list[str]:
    """`n` turn documents spread evenly over LoCoMo's dev conversations."""
    from cuemem.bench.datasets import LOCOMO_DEV, load_locomo
    from cuemem.config import Settings
    from cuemem.engines.baselines import turn_document

    path = Path(Settings.load().datasets or ROOT / "datasets") / "locomo" / "locomo10.json"
    docs = [turn_document(t) for c in load_locomo(path) if c.id in LOCOMO_DEV for t in c.turns]
    step = max(1, len(docs) // n)
    return docs[::step][:n]


def child(runtime: str, docs_file: str, vectors_file: str) -> None:
    """One runtime in this fresh process: load + one query, then the documents; a JSON line on stdout."""
    import numpy as np

    from cuemem.config import Settings
    from cuemem.embed import embed_query, make_embedder

    out: dict = {"runtime": runtime, "loadavg_before": loadavg()}
    embedder = make_embedder(Settings.load())
    if "torch" in runtime:
        import torch

        torch.set_num_threads(2)
    embed_query(embedder, ["When did Caroline go to the LGBTQ support group?"])
    out["load_s"] = round(time.perf_counter() - STARTED, 2)
    out["peak_rss_mb_after_query"] = round(peak_mb())
    out["heavy_modules"] = [m for m in HEAVY if m in sys.modules]
    out["embedder"] = embedder.name
    docs = json.loads(Path(docs_file).read_text())
    embedder.embed(docs[:4])  # warm
    start = time.perf_counter()
    vectors = embedder.embed(docs)
    out["turns_per_s"] = round(len(docs) / (time.perf_counter() - start), 1)
    out["peak_rss_mb"] = round(peak_mb())
    out["loadavg_after"] = loadavg()
    np.save(vectors_file, vectors)
    print(json.dumps(out))


def run_child(runtime: str, docs_file: Path, vectors: Path) -> dict:
    env = {**os.environ, **RUNTIMES[runtime], "CUEMEM_ONNX_THREADS": "2", "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, __file__, "--child", runtime, str(docs_file), str(vectors)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def cli_search(runtime: str, repeats: int) -> dict:
    """`cuemem search` on a 40-turn store built with this runtime, default engine: best wall / its peak RSS."""
    env = {**os.environ, **RUNTIMES[runtime]}
    with tempfile.TemporaryDirectory() as tmp:
        env["CUEMEM_DB"] = str(Path(tmp) / "small.db")
        build = (
            "from cuemem import Memory\n"
            "from bench_docs import docs\n"
            "m = Memory()\n"
            "for i, d in enumerate(docs):\n"
            "    m.add(d, user_id='u')\n"
            "m.close()\n"
        )
        docs = dev_documents(40)
        (Path(tmp) / "bench_docs.py").write_text(f"docs = {docs!r}\n")
        subprocess.run([sys.executable, "-c", build], env={**env, "PYTHONPATH": f"{tmp}:{ROOT}"}, check=True)
        runs = []
        for _ in range(repeats):
            load = loadavg()
            done = subprocess.run(
                ["/usr/bin/time", "-v", sys.executable, "-m", "cuemem.cli", "search", "support group", "-u", "u"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
            rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
            assert wall and rss, done.stderr[-2000:]
            h, m, s = wall.groups()
            seconds = int(h or 0) * 3600 + int(m) * 60 + float(s)
            runs.append({"wall_s": round(seconds, 2), "peak_rss_mb": round(int(rss.group(1)) / 1024), "loadavg": load})
    best = min(runs, key=lambda r: r["wall_s"])
    return {"best": best, "runs": runs}


def recall(spec: str) -> tuple[str, dict]:
    """NAME=DIR: each engine's recall@5/@10 and ingest cost in DIR/results.json (a `cuemem bench locomo` run)."""
    name, folder = spec.split("=", 1)
    data = json.loads((Path(folder) / "results.json").read_text())
    out = {}
    for engine, result in data["engines"].items():
        retrieval, cost = result["retrieval"], result.get("cost", {})
        out[engine] = {k: round(retrieval[k], 4) for k in ("recall@5", "recall@10", "ndcg@10")}
        out[engine]["questions"] = retrieval["questions"]
        out[engine]["ingest_turns_per_s"] = round(cost.get("turns_per_s", 0.0), 1)
        out[engine]["peak_rss_mb"] = round(cost.get("peak_rss_mb", 0.0))
    return name, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-out/embedder-runtime.json")
    parser.add_argument("--turns", type=int, default=256)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--repeats", type=int, default=3, help="CLI searches per runtime (the best is kept)")
    parser.add_argument("--no-cli", action="store_true")
    parser.add_argument("--recall", action="append", default=[], help="NAME=DIR of a bench locomo --split dev run")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    import numpy as np

    result: dict = {"cpu_threads": 2, "turns": args.turns, "runtimes": {}, "cli_search": {}, "recall_dev": {}}
    with tempfile.TemporaryDirectory() as tmp:
        docs_file = Path(tmp) / "docs.json"
        docs_file.write_text(json.dumps(dev_documents(args.turns)))
        vectors = {}
        for runtime in args.runtimes.split(","):
            print(f"{runtime}: load + {args.turns} turns ...", file=sys.stderr, flush=True)
            result["runtimes"][runtime] = run_child(runtime, docs_file, Path(tmp) / f"{runtime}.npy")
            vectors[runtime] = np.load(Path(tmp) / f"{runtime}.npy")
        if "torch" in vectors:
            for runtime, v in vectors.items():
                cos = (v * vectors["torch"]).sum(1)
                result["runtimes"][runtime]["cosine_to_torch"] = {
                    "mean": round(float(cos.mean()), 5),
                    "min": round(float(cos.min()), 5),
                }
    if not args.no_cli:
        for runtime in args.runtimes.split(","):
            print(f"{runtime}: cuemem search ...", file=sys.stderr, flush=True)
            result["cli_search"][runtime] = cli_search(runtime, args.repeats)
    result["recall_dev"] = dict(recall(spec) for spec in args.recall)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
