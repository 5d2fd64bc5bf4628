"""fedgs: federated, differentially private GANs (GS-WGAN and Fed-Avg GAN) on Flower.

The core library lives here; ``fedgs.server``, ``fedgs.client`` and ``fedgs.simulations`` are
installed from the repository's ``server/``, ``client/`` and ``simulations/`` folders.

Imported from a source checkout instead of an installation, this folder finds those three beside
it: Ray puts the driver's working directory first on every worker's ``sys.path`` and ``flwr run .``
puts the app directory first, so a simulation started from the checkout's root imports this
folder in its workers even when fedgs is installed (issue 18: every client failed with ``No module
named 'fedgs.client'``). An installed fedgs has no ``pyproject.toml`` beside it and is left as is.
"""

from pathlib import Path

__version__ = "0.1.0"

_CHECKOUT = Path(__file__).resolve().parent.parent
_MAPPED = ("server", "client", "simulations")  # pyproject.toml's package-dir
if (_CHECKOUT / "pyproject.toml").is_file() and all(
    (_CHECKOUT / name / "__init__.py").is_file() for name in _MAPPED
):
    __path__.append(str(_CHECKOUT))  # fedgs.<name> -> <checkout>/<name>; fedgs/ itself stays first
