"""``python -m fedgs.deploy.prompt_supernode``: ``flower-supernode`` (same arguments) with the
shorter fixed waits of :mod:`fedgs.deploy.flower_waits`, so a message reaches the node, and its
reply the SuperLink, without Flower's 3 s / 0.5 s / 1 s pauses. ``--doorbell NAME``: ring that
bell when a message has arrived (:mod:`fedgs.deploy.doorbell`), so the node's SuperExec need
not poll for it. ``--link-doorbell PREFIX`` (with node authentication): pull the SuperLink when
it rings this node's bell, instead of every 0.25 s."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flwr.supernode.cli.flower_supernode import flower_supernode

from fedgs.deploy.doorbell import ring_on_arrival, wake_on_link_ring
from fedgs.deploy.flower_waits import shorten_object_pulls, shorten_supernode_waits


def _public_key(flower_args: list[str]) -> bytes:
    """This node's public key as Flower sends it to the SuperLink (the bell's name)."""
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--auth-supernode-private-key", required=True)
    key_file = Path(parser.parse_known_args(flower_args)[0].auth_supernode_private_key)
    private_key = load_ssh_private_key(key_file.expanduser().read_bytes(), password=None)
    return public_key_to_bytes(private_key.public_key())  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--doorbell")
    parser.add_argument("--link-doorbell", metavar="PREFIX")
    ours, flower_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    shorten_supernode_waits()
    shorten_object_pulls()
    if ours.doorbell:
        ring_on_arrival(ours.doorbell)
    if ours.link_doorbell:
        wake_on_link_ring(ours.link_doorbell, _public_key(flower_args))
    sys.argv = ["flower-supernode", *flower_args]
    flower_supernode()


if __name__ == "__main__":
    main()
