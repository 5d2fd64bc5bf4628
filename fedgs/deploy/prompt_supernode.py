"""``python -m fedgs.deploy.prompt_supernode``: ``flower-supernode`` (same arguments) with the
shorter fixed waits of :mod:`fedgs.deploy.flower_waits`, so a message reaches the node, and its
reply the SuperLink, without Flower's 3 s / 0.5 s / 1 s pauses."""

from __future__ import annotations

import sys

from flwr.supernode.cli.flower_supernode import flower_supernode

from fedgs.deploy.flower_waits import shorten_object_pulls, shorten_supernode_waits


def main(argv: list[str] | None = None) -> None:
    shorten_supernode_waits()
    shorten_object_pulls()
    sys.argv = ["flower-supernode", *(sys.argv[1:] if argv is None else argv)]
    flower_supernode()


if __name__ == "__main__":
    main()
