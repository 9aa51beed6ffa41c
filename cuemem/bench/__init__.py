"""The benchmark harness: datasets, metrics, runner and report (LoCoMo, LongMemEval)."""
