"""Context tokens per question for the same hits, before and after date headers (issue 13).

    python benchmarks/context_tokens.py OLD_OUT NEW_OUT ENGINE [K]

OLD_OUT and NEW_OUT are `cuemem bench` output directories (stores and checkpoints kept) of the same engine and
conversations, made before and after issue 13. For each question the top K hits of each run (K = 10) cost the sum
of their items' token counts: before, every hit carries "[date] speaker: "; after, hits carry "speaker: " and the
packed context has one date heading per session block (`session_heading`, counted with the shipped token
counter). Prints mean tokens and mean recall@K of both runs.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuemem.engines.structure import session_heading
from cuemem.index.tokens import default_counter


def item_tokens(db: Path, engine: str) -> dict[tuple[int, str], tuple[int, str, int]]:
    """(namespace, turn id) -> (token count, session id, tokens of its session's heading) of the engine's items."""
    space = "turn" if engine in ("bm25", "dense", "hybrid", "fullcontext") else f"{engine}:step"
    counter = default_counter()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        rows = c.execute("SELECT ns, key, tokens, meta FROM items WHERE space=?", (space,)).fetchall()
    out = {}
    for ns, key, tokens, meta in rows:
        fields = json.loads(meta)
        out[(ns, key)] = (tokens, str(fields.get("session_id")), counter.count(session_heading(fields)))
    return out


def namespaces(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        return {user.split(":", 1)[1]: ns for ns, user in c.execute("SELECT id, user_id FROM namespaces")}


def main() -> None:
    old, new, engine = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    k = int(sys.argv[4]) if len(sys.argv) > 4 else 10
    figures = {}
    for label, out in (("before", old), ("after", new)):
        db = out / "stores" / f"{engine}.db"
        tokens, ns_of = item_tokens(db, engine), namespaces(db)
        costs, recalls = [], []
        for path in sorted((new / "checkpoints" / engine).glob("*.json")):  # the conversations of the new run
            conv = json.loads((out / "checkpoints" / engine / path.name).read_text())
            ns = ns_of[conv["conversation"]]
            for q in conv["questions"]:
                if q["adversarial"] or not q["evidence"]:
                    continue
                top = [ids[0] for ids in q["top"][:k]]
                found = [tokens[(ns, t)] for t in top if (ns, t) in tokens]
                cost = sum(n for n, _, _ in found)
                if label == "after":
                    cost += sum({session: heading for _, session, heading in found}.values())
                costs.append(cost)
                recalls.append(q[f"recall@{k}"])
        figures[label] = {
            "questions": len(costs),
            "tokens": statistics.fmean(costs),
            f"recall@{k}": statistics.fmean(recalls),
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
