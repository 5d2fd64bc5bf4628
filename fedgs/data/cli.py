"""``fedgs data``: load a dataset (building its cache) and show what a run would get.

The loaders import torch and ``datasets``, so only the handler imports them, not ``--help``.
"""

from __future__ import annotations

import argparse
import json
import sys

from fedgs.data.errors import DataError
from fedgs.data.names import DATASET_NAMES, LABEL_MODES, NATURAL, PARTITIONS

EXIT_DATA_ERROR = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``data`` subcommand to the ``fedgs`` parser."""
    parser = subparsers.add_parser(
        "data",
        help="show clients, images and classes of a federated dataset",
        description=(
            "Load a federated dataset (parsing it once into the cache at $FEDGS_CACHE, default "
            "~/.cache/fedgs) and print its clients, images per split, classes and per-client "
            "sizes."
        ),
    )
    parser.add_argument("--dataset", choices=DATASET_NAMES, default="embedded")
    parser.add_argument(
        "--data-dir",
        help=(
            "femnist: a folder of FEMNIST Parquet shards or LEAF's output (default: "
            "$FEDGS_FEMNIST, else ../shared/data/femnist_full); mnist: a folder of IDX files"
        ),
    )
    parser.add_argument("--labels", choices=LABEL_MODES, default="digits")
    parser.add_argument(
        "--clients",
        type=int,
        help="virtual clients (embedded: 50, mnist: 1000); femnist: the first N writers (all)",
    )
    parser.add_argument("--partition", choices=(*PARTITIONS, NATURAL), help="default: iid")
    parser.add_argument("--seed", type=int, default=0, help="seed of the client partition")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from fedgs.data.load import load_federated
    from fedgs.data.summary import format_summary, summarize

    try:
        ds = load_federated(
            args.dataset,
            args.data_dir,
            labels=args.labels,
            num_clients=args.clients,
            partition=args.partition,
            seed=args.seed,
        )
    except DataError as err:
        print(f"fedgs data: error: {err}", file=sys.stderr)
        return EXIT_DATA_ERROR
    summary = summarize(ds)
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
