"""Where the benchmark scripts find their data: the datasets setting (CUEMEM_DATASETS, default `datasets/` under
the working directory), as `cuemem bench` does, or a `--datasets DIR` option that sets it for the run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LOCOMO = "locomo/locomo10.json"
LONGMEMEVAL_S = "longmemeval/longmemeval_s_cleaned.PARTIAL_499of500.json.gz"


def datasets_dir() -> Path:
    """The datasets setting (settings file, then CUEMEM_DATASETS; default datasets/)."""
    from cuemem.config import Settings

    return Settings.load(None).datasets


def dataset_file(relative: str) -> Path:
    """A dataset file under the datasets setting, e.g. dataset_file(LOCOMO)."""
    return datasets_dir() / relative


def add_datasets_option(parser: argparse.ArgumentParser) -> None:
    """--datasets DIR: the benchmark data's directory for this run (default: the datasets setting)."""
    parser.add_argument(
        "--datasets",
        help="directory of the benchmark data, holding locomo/ and longmemeval/ (default: the datasets setting:"
        " CUEMEM_DATASETS, else datasets/)",
    )


def apply_datasets_option(args: argparse.Namespace) -> None:
    """Make --datasets the datasets setting for this process and its subprocesses."""
    if getattr(args, "datasets", None):
        os.environ["CUEMEM_DATASETS"] = str(Path(args.datasets).resolve())
