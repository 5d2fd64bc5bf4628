"""A finished run directory read back: its settings, per-step metrics and privacy report.

Three writers produce run directories (``fedgs simulate`` for GS-WGAN and Fed-Avg GAN, and
``fedgs centralized``); this module is the one place that knows how their files differ, so
evaluation and reports read every kind alike. Only json/csv here: the parser may import it.
privacy.json is read through ``fedgs.privacy.report``, the one reader of its every version.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from fedgs.privacy.report import read_privacy


class RunError(ValueError):
    """The folder is not a usable run directory; the message says what is missing."""


@dataclass(frozen=True)
class DataSpec:
    """What ``load_federated`` needs to reload a run's data (its real train and test split)."""

    dataset: str
    data_dir: str | None
    labels: str
    num_clients: int | None
    seed: int


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunError(f"{path.parent}: no {path.name}; is this a finished fedgs run?") from None
    except ValueError as error:
        raise RunError(f"{path}: unreadable JSON ({error})") from None


def _number(text: str | None) -> float | None:
    return None if text in (None, "") else float(text)


@dataclass(frozen=True)
class RunFiles:
    """Lazy access to one run directory's files."""

    root: Path

    @classmethod
    def open(cls, root: str | Path) -> RunFiles:
        path = Path(root)
        if not path.is_dir():
            raise RunError(f"{path}: no such run directory")
        return cls(path)

    @property
    def name(self) -> str:
        return self.root.resolve().name

    @property
    def generator_pt(self) -> Path:
        return self.root / "generator.pt"

    @property
    def evaluation_dir(self) -> Path:
        return self.root / "evaluation"

    @cached_property
    def config(self) -> dict[str, Any]:
        return _read_json(self.root / "config.json")

    @cached_property
    def privacy(self) -> dict[str, Any]:
        """privacy.json in the current schema (``fedgs.privacy.report``), whatever version the
        run wrote; config.json names the strategy of an old file without a tag."""
        raw = _read_json(self.root / "privacy.json")
        strategy = self.strategy if (self.root / "config.json").exists() else None
        try:
            return read_privacy(raw, strategy)
        except ValueError as error:
            raise RunError(f"{self.root}: {error}") from None

    @cached_property
    def metrics(self) -> list[dict[str, float | None]]:
        """One dict per logged step; empty cells (scores between evaluations) are None."""
        path = self.root / "metrics.csv"
        if not path.exists():
            raise RunError(f"{self.root}: no metrics.csv; is this a finished fedgs run?")
        with path.open(newline="") as handle:
            return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(handle)]

    @property
    def strategy(self) -> str:
        """``gswgan`` or ``fedavg-gan``; centralized runs are GS-WGAN."""
        return str(self.config.get("strategy", "gswgan"))

    @property
    def runner(self) -> str:
        """``centralized`` (fedgs centralized, one process) or ``federated`` (Flower)."""
        return "centralized" if self.config.get("runner") == "local" else "federated"

    def setting(self, key: str, default: Any = None) -> Any:
        """A run-config value by its hyphenated key, for any writer's config.json."""
        if key in self.config:
            return self.config[key]
        underscored = key.replace("-", "_")
        for block in (self.config, self.config.get("options", {}), self.config.get("gswgan", {})):
            if underscored in block:
                return block[underscored]
        return default

    @property
    def num_clients(self) -> int | None:
        """Clients (or data subsets) the run had: the node count or the loaded client count."""
        for key in ("num_nodes", "num_clients"):
            if self.config.get(key):
                return int(self.config[key])
        return int(self.setting("num-clients", 0)) or None

    def data_spec(self, data_dir: str | None = None, num_clients: int | None = None) -> DataSpec:
        """The run's own data split: its dataset, folder, labels, clients and seed as recorded.

        ``data_dir`` overrides the recorded folder (data moved, old runs); ``num_clients``
        overrides the recorded number of clients (0: all of the dataset's). FEMNIST's
        ``--clients N`` run is scored on its own N training writers (the evaluation writers are
        the same for every N); a saved dataset has fixed clients.
        """
        dataset = self.setting("dataset")
        if dataset is None:
            raise RunError(f"{self.root}/config.json names no dataset")
        clients = self.setting("num-clients") if num_clients is None else num_clients
        return DataSpec(
            dataset=str(dataset),
            data_dir=data_dir or self.setting("data-dir") or None,
            labels=str(self.setting("labels", "digits")),
            num_clients=None if dataset == "saved" or not clients else int(clients),
            seed=int(self.setting("seed", 0)),
        )

    def samples(self) -> list[Path]:
        """Sample grids in step order."""
        return sorted((self.root / "samples").glob("step_*.png"))

    def last_scores(self) -> dict[str, float] | None:
        """The last evaluation row's IS, domain FID and label agreement, if any was logged."""
        scored = [r for r in self.metrics if r.get("fid_domain") is not None]
        if not scored:
            return None
        last = scored[-1]
        keys = ("step", "inception_score", "fid_domain", "label_agreement")
        return {k: last[k] for k in keys if last.get(k) is not None}
