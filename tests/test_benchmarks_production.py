"""benchmarks/production.py (issue 36 item 5): the namespace sizes' power law and the hot/cold namespace picker."""

import random
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from production import curve_chooser  # noqa: E402
from production_seed import NamespacePicker, owner, power_law_sizes, size_summary, user_of  # noqa: E402


def test_sizes_sum_to_the_turns_and_follow_a_power_law_at_the_issue_scale():
    sizes = power_law_sizes(1_000_000, 10_000)
    assert sum(sizes) == 1_000_000 and len(sizes) == 10_000
    assert sizes == sorted(sizes, reverse=True) and min(sizes) >= 1
    summary = size_summary(sizes)
    assert summary["max"] > 100_000 and summary["count_ge_50k"] >= 2  # a few with 50k+ turns
    assert summary["count_lt_100"] > 0.85 * 10_000  # most under 100
    assert 10 <= summary["p50"] <= 30
    assert sizes[0] / sizes[9] == pytest.approx(10, rel=0.01)  # Zipf: size ~ 1 / rank


@pytest.mark.parametrize(("total", "count", "exponent"), [(20_000, 200, 1.0), (500, 500, 1.0), (1_000, 300, 2.0)])
def test_sizes_sum_exactly_with_at_least_one_turn_each(total, count, exponent):
    sizes = power_law_sizes(total, count, exponent)
    assert sum(sizes) == total and len(sizes) == count and min(sizes) >= 1


def test_sizes_need_a_turn_per_namespace():
    with pytest.raises(ValueError):
        power_law_sizes(10, 11)


def test_the_picker_mixes_hot_by_size_and_cold_uniform():
    sizes = [900, 50, 25, 25]
    rng = random.Random(1)
    hot = Counter(NamespacePicker(sizes, 1.0).pick(rng) for _ in range(20_000))
    assert {heat for _, heat in hot} == {"hot"}
    assert hot[(0, "hot")] / 20_000 == pytest.approx(0.9, abs=0.02)  # by size
    cold = Counter(i for i, _ in (NamespacePicker(sizes, 0.0).pick(rng) for _ in range(20_000)))
    assert all(cold[i] / 20_000 == pytest.approx(0.25, abs=0.02) for i in range(4))  # uniform
    mixed = [NamespacePicker(sizes, 0.5).pick(rng) for _ in range(20_000)]
    assert sum(heat == "hot" for _, heat in mixed) / 20_000 == pytest.approx(0.5, abs=0.02)
    assert sum(i == 0 for i, _ in mixed) / 20_000 == pytest.approx(0.5 * 0.9 + 0.5 * 0.25, abs=0.02)


def test_the_write_only_curve_gives_each_client_its_own_namespaces():
    choose = curve_chooser(100, 8)
    rng = random.Random(2)
    owned = [{choose(n)(rng)[0] for _ in range(200)} for n in range(8)]
    assert all(a.isdisjoint(b) for i, a in enumerate(owned) for b in owned[i + 1 :])
    assert set().union(*owned) == set(range(100))


def test_turn_ids_name_their_namespace():
    assert owner(f"{user_of(42)}-w1a2b3c4n5") == user_of(42) == "p00042"
