"""fedgs.recipes and ``--config``: every shipped recipe is valid for the command it names, a
recipe gives defaults that command-line options override, bad recipes fail with a message."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedgs import cli, recipes
from fedgs.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted((ROOT / "recipes").rglob("*.toml"))
# privacy-utility grid points: recipes/privacy-utility/<strategy>-<secure|local>-e<EPSILON>.toml
GRID_POINTS = sorted((ROOT / "recipes" / "privacy-utility").glob("*.toml"))
# the grid's population: every digit writer of the complete FEMNIST set (`fedgs data`), whom the
# strategies with many steps (GS-WGAN, Fed-Avg GAN) query a planned number of times each
GRID_WRITERS = 2824
GRID_NAME = re.compile(
    r"(?P<strategy>[a-z-]+?)-(?P<model>secure|local|trusted)-e(?P<epsilon>[0-9.]+)"
)
# the header line that uses the recipe: `fedgs COMMAND ... --config recipes/NAME.toml`
COMMAND = re.compile(r"fedgs ([a-z-]+(?: local)?) .*--(?:run-)?config recipes/")


def _command(recipe: Path) -> str:
    """The command the recipe's header shows it with."""
    found = COMMAND.findall(recipe.read_text())
    assert len(set(found)) == 1, f"{recipe.name}: its header must show one fedgs command"
    return found[0]


def test_recipes_are_shipped() -> None:
    names = {path.stem for path in SHIPPED}
    assert {"first-run", "femnist-e1000", "debug-femnist-e10", "deploy-local"} <= names
    targets = {GRID_NAME.fullmatch(path.stem)["epsilon"] for path in GRID_POINTS}
    assert targets == {"1", "3", "10", "100"}


def _planned_epsilon(config: RunConfig) -> float:
    """The epsilon a grid point's run will report, planned as `fedgs privacy` plans it."""
    from fedgs.privacy.accountants import get_accountant
    from fedgs.privacy.events import mean_embedding_event
    from fedgs.privacy.secure_plan import SecureRun

    if config.strategy in ("gswgan", "fedavg-gan"):
        return _planned_epsilon_of_many_steps(config)
    assert config.strategy == "dp-merf", "plan this strategy's grid points here too"
    sigma = config.merf_noise_multiplier
    if not config.secure_aggregation:
        return get_accountant(config.accountant).epsilon(mean_embedding_event(sigma), config.delta)
    keys = (("secagg-degree", config.secagg_degree),)
    run = SecureRun("dp-merf", 1, config.delta, config.accountant, config.client_sampling, keys)
    return run.step(config.clients_per_step, sigma).headline_epsilon(1)


def _planned_epsilon_of_many_steps(config: RunConfig) -> float:
    """`fedgs privacy --json` on the grid's population: the most-queried writer's epsilon."""
    argv = ["privacy", "--json", "--clients", str(GRID_WRITERS), "--steps", str(config.steps)]
    argv += ["--batch-size", str(config.batch_size), "--delta", str(config.delta)]
    if config.strategy == "fedavg-gan":
        noise, per_step = config.fedavg_noise_multiplier, config.fedavg_clients_per_round
        argv += ["--strategy", "fedavg-gan"]
        if config.secure_aggregation:
            argv += ["--fedavg-models", config.fedavg_models]
    else:
        noise, per_step = config.noise_multiplier, config.clients_per_step
        argv += ["--client-sampling", config.client_sampling]
    argv += ["--noise-multiplier", str(noise)]
    if config.secure_aggregation:
        argv += ["--secure-aggregation", "--cohort", str(per_step)]
    else:
        argv += ["--clients-per-step", str(per_step)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        args = cli.parse(argv)
        assert args.handler(args) == 0
    plan = json.loads(printed.getvalue())
    if config.secure_aggregation:
        return plan["epsilon_secure_aggregation"]
    return plan["epsilon" if config.strategy == "fedavg-gan" else "epsilon_untrusted_worst_client"]


@pytest.mark.parametrize("recipe", GRID_POINTS, ids=lambda path: path.stem)
def test_each_grid_point_holds_the_epsilon_its_name_says_and_no_more_noise(recipe: Path) -> None:
    # fails if a point's noise misses its epsilon, or buys a tighter epsilon than its column
    # (a point at epsilon 0.5 filed under 1 would understate what the method reaches)
    name = GRID_NAME.fullmatch(recipe.stem)
    config = RunConfig.from_user_config(recipes.read(recipe))
    assert config.secure_aggregation == (name["model"] == "secure")
    assert config.run_dir == f"runs/privacy-utility/{recipe.stem}"
    target = float(name["epsilon"])
    assert 0.99 * target <= _planned_epsilon(config) <= target


@pytest.mark.parametrize("recipe", SHIPPED, ids=lambda path: path.stem)
def test_each_recipe_is_valid_for_its_command(recipe: Path) -> None:
    command = _command(recipe)
    values = recipes.read(recipe)
    if command in ("simulate", "deploy local"):  # run-config keys: `flwr run --run-config` too
        config = RunConfig.from_user_config(values)
        assert all(getattr(config, key.replace("-", "_")) == value for key, value in values.items())
    if command == "deploy local":
        return
    args = cli.parse([*command.split(), "--config", str(recipe)])
    for key, value in values.items():
        dest = {"out": "run_dir"}.get(key, key.replace("-", "_")) if command == "simulate" else key
        assert getattr(args, dest.replace("-", "_")) == pytest.approx(value), key


def test_command_line_options_win_over_the_recipe(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('steps = 7\nnoise-multiplier = 3.5\nclient-sampling = "least-queried"\n')
    for argv in (
        ["simulate", "--steps", "2", "--config", str(recipe)],
        ["simulate", "--config", str(recipe), "--steps", "2"],
    ):
        args = cli.parse(argv)
        assert (args.steps, args.noise_multiplier, args.client_sampling) == (
            2,
            3.5,
            "least-queried",
        )
    assert cli.parse(["simulate"]).steps == RunConfig().steps  # no recipe, no trace of one


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("noise-multipler = 1.0\n", "'noise-multipler' is not an option of `fedgs simulate`"),
        ('steps = "many"\n', "'steps' = 'many'"),
        ("steps = true\n", "'steps' takes a value"),
        ("resume = 1\n", "'resume' must be true or false"),
        ("[table]\nsteps = 1\n", "must be plain values"),
        ("steps = \n", "cannot read recipe"),
    ],
)
def test_a_bad_recipe_is_a_usage_error_naming_the_key(
    tmp_path: Path, text: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "bad.toml"
    recipe.write_text(text)
    with pytest.raises(SystemExit) as ended:
        cli.parse(["simulate", "--config", str(recipe)])
    assert ended.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_recipe_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(["debug-scenario", "--config", "no/such/recipe.toml"])
    assert "no recipe at no/such/recipe.toml" in capsys.readouterr().err


def test_the_deploy_recipe_is_the_deployments_run_config(tmp_path: Path) -> None:
    from fedgs.deploy.cli import _local_run_config

    args = cli.parse(
        [
            "deploy",
            "local",
            "--out",
            str(tmp_path),
            "--run-config",
            str(ROOT / "recipes" / "deploy-local.toml"),
        ]
    )
    config = _local_run_config(args)
    assert recipes.read(ROOT / "recipes" / "deploy-local.toml").items() <= config.items()


@pytest.mark.slow
def test_the_first_run_recipe_runs(tmp_path: Path) -> None:
    """The first-run recipe end to end, shortened from the command line (2 steps, tiny models)."""
    out = tmp_path / "first"
    argv = [sys.executable, "-m", "fedgs.cli", "simulate", "--config"]
    argv += [str(ROOT / "recipes" / "first-run.toml"), "--steps", "2", "--num-clients", "6"]
    argv += ["--generator-width", "4", "--critic-width", "4", "--warm-start-steps", "1"]
    argv += ["--batch-size", "8", "--ray-cpus", "2", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with (out / "metrics.csv").open(newline="") as handle:
        assert [row["step"] for row in csv.DictReader(handle)] == ["1", "2"]
    assert json.loads((out / "privacy.json").read_text())
