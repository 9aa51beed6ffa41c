"""Every benchmark metric on hand-computed cases, including each LoCoMo F1 special case."""

from __future__ import annotations

import math

import pytest

from cuemem.bench.metrics import bleu1, evidence_recall, locomo_f1, ndcg, normalize_answer, set_f1, stem, token_f1

HITS = [["a"], ["x"], ["b", "c"], ["y"], ["d"]]


def test_evidence_recall_at_k_counts_turns_cited_by_the_top_k_hits():
    evidence = ["a", "b", "d", "z"]
    assert evidence_recall(HITS, evidence, 1) == 1 / 4
    assert evidence_recall(HITS, evidence, 3) == 2 / 4  # hit 3 cites b (and c)
    assert evidence_recall(HITS, evidence, 5) == 3 / 4
    assert evidence_recall(HITS, evidence) == 3 / 4  # all hits (the packed budget)
    assert evidence_recall(HITS, ["a", "a"], 1) == 1.0  # duplicates count once
    assert math.isnan(evidence_recall(HITS, [], 5))


def test_ndcg_binary_gains_over_cited_turns():
    # cited turns in order: a x b c y d. ["a","b"] at ranks 1 and 3: DCG = 1 + 1/log2(4) = 1.5; IDCG = 1 + 1/log2(3)
    assert ndcg(HITS, ["a", "b"], 10) == pytest.approx(1.5 / (1 + 1 / math.log2(3)))
    # the third hit cites b and c: they take ranks 3 and 4
    assert ndcg(HITS, ["b", "c"], 10) == pytest.approx((1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert ndcg([["a", "b"]], ["a", "b"], 10) == 1.0  # one hit citing all the evidence is a perfect ranking
    assert ndcg([["a"], ["a"], ["b"]], ["a", "b"], 10) == 1.0  # a turn cited again takes no position
    assert ndcg(HITS, ["d"], 5) == 0.0  # d is the 6th cited turn
    assert ndcg(HITS, ["q"], 10) == 0.0


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("cats", "cat"),
        ("feed", "feed"),
        ("agreed", "agre"),
        ("plastered", "plaster"),
        ("motoring", "motor"),
        ("sing", "sing"),
        ("hopping", "hop"),
        ("falling", "fall"),
        ("filing", "file"),
        ("happy", "happi"),
        ("relational", "relat"),
        ("conditional", "condit"),
        ("rational", "ration"),
        ("triplicate", "triplic"),
        ("hopeful", "hope"),
        ("goodness", "good"),
        ("allowance", "allow"),
        ("adjustable", "adjust"),
        ("adoption", "adopt"),
        ("effective", "effect"),
        ("probate", "probat"),
        ("rate", "rate"),
        ("controll", "control"),
        ("roll", "roll"),
    ],
)
def test_porter_stems_match_porters_paper(word, expected):
    assert stem(word) == expected


def test_locomo_normalisation_and_token_f1():
    assert normalize_answer("The cat, and a Dog!") == "cat dog"
    assert token_f1("running dogs", "the dog runs") == 1.0  # stems: run dog / dog run
    # pred: went to park (3 tokens after normalising), gold: park yesterday -> overlap 1: P=1/3, R=1/2
    assert token_f1("went to the park", "park yesterday") == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))
    assert token_f1("nothing", "something else") == 0.0


def test_locomo_category_special_cases():
    # cat 1: the gold is split on ","; each part's best match among the prediction's parts, averaged
    assert locomo_f1("painting, hiking", "hiking, painting, swimming", "1") == pytest.approx(2 / 3)
    # cat 3: the gold up to the first ";"
    assert locomo_f1("likely yes", "likely yes; because she said so", "3") == 1.0
    # cat 5: 1 when the output says it is not mentioned / not available
    assert locomo_f1("That is not mentioned in the conversation.", "anything", "5") == 1.0
    assert locomo_f1("No information available.", "anything", "5") == 1.0
    assert locomo_f1("Paris", "anything", "5") == 0.0
    # what the benchmark's reader says on LoCoMo when its excerpts do not hold the answer (or nothing was found)
    from cuemem.answer import system_prompt
    from cuemem.bench.protocol import ABSTAIN

    assert ABSTAIN["locomo"] in system_prompt(ABSTAIN["locomo"]) and locomo_f1(ABSTAIN["locomo"], "x", "5") == 1.0
    # other categories: plain token F1
    assert locomo_f1("7 May 2023", "7 May 2023", "2") == 1.0


def test_set_f1_and_bleu1():
    assert set_f1("the cat sat", "The cat, the hat") == pytest.approx(2 * (2 / 3) * (2 / 3) / (4 / 3))  # {the,cat}
    assert set_f1("x", "y") == 0.0
    # BLEU-1: 2 of 3 predicted unigrams match (clipped), no brevity penalty when the prediction is longer
    assert bleu1("cat sat mat", "cat mat") == pytest.approx(2 / 3)
    # shorter prediction: brevity penalty exp(1 - 4/2)
    assert bleu1("cat mat", "cat on the mat") == pytest.approx(math.exp(1 - 4 / 2) * 1.0)
    assert bleu1("", "x") == 0.0


def test_percentile_is_nearest_rank():
    from cuemem.bench.metrics import percentile

    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0 and percentile(values, 95) == 5.0 and percentile(values, 0) == 1.0
    assert math.isnan(percentile([], 50))
    assert percentile([1.0, 2.0], 50) == 1.0 and percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile([float(v) for v in range(1, 21)], 95) == 19.0
