"""benchmarks/compare_runs.py: two bench runs compared question by question (issue 32, recall unchanged)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare_runs  # noqa: E402


def _run(root: Path, top: list[list[str]], recall: float) -> Path:
    nan = float("nan")
    q = {"id": "q1", "category": "4", "evidence": ["D1:1"], "top": top, "recall@1": recall, "recall@10": recall}
    unanswerable = {"id": "q2", "category": "5", "evidence": [], "top": top, "recall@1": nan, "recall@10": nan}
    path = root / "checkpoints" / "bm25" / "conv-1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"questions": [q, unanswerable]}))
    return root


def test_identical_runs_compare_equal_nan_included(tmp_path, capsys):
    a = _run(tmp_path / "a", [["D1:1"], ["D1:2"]], 1.0)
    b = _run(tmp_path / "b", [["D1:1"], ["D1:2"]], 1.0)
    assert compare_runs.main([str(a), str(b)]) == 0
    assert (
        "differing rankings: 0, differing figures: 0; R@10 (categories 1-4) 1.000 -> 1.000" in capsys.readouterr().out
    )


def test_a_changed_ranking_or_figure_fails(tmp_path, capsys):
    a = _run(tmp_path / "a", [["D1:1"], ["D1:2"]], 1.0)
    b = _run(tmp_path / "b", [["D1:2"], ["D1:1"]], 0.0)
    assert compare_runs.main([str(a), str(b)]) == 1
    assert "differing rankings: 2, differing figures: 1;" in capsys.readouterr().out


def test_runs_with_nothing_in_common(tmp_path):
    a = _run(tmp_path / "a", [["D1:1"]], 1.0)
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    assert compare_runs.main([str(a), str(tmp_path / "b")]) == 2
