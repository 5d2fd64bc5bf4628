"""The downstream classifiers of the GS-WGAN paper's utility table (appendix C.3, Table A1).

Torch networks: an MLP with one hidden layer of 100 units and a CNN with two convolutions (32, 64
channels) and dropout. scikit-learn classifiers with their default hyper-parameters (only
``random_state`` is fixed, for repeatable tables); XGBoost when the package is installed.
Each classifier is a function ``fit_predict(train, test_images) -> predicted labels``.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from fedgs.evaluation.names import CLASSIFIER_NAMES, OPTIONAL_CLASSIFIERS, TORCH_CLASSIFIERS

Arrays = tuple[torch.Tensor, torch.Tensor]
FitPredict = Callable[[Arrays, torch.Tensor], np.ndarray]


def mlp(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(), nn.Linear(28 * 28, 100), nn.ReLU(), nn.Linear(100, num_classes)
    )


def cnn(num_classes: int) -> nn.Module:
    """The Keras MNIST CNN: conv 32, conv 64, max-pool, dropout, dense 128, dropout."""
    return nn.Sequential(
        nn.Conv2d(1, 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * 12 * 12, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, num_classes),
    )


def _unit(images: torch.Tensor) -> torch.Tensor:
    """[-1, 1] images to [0, 1], the scale the paper's classifiers saw."""
    return ((images.float() + 1.0) / 2.0).clamp(0.0, 1.0)


def fit_torch(
    name: str,
    train: Arrays,
    num_classes: int,
    epochs: int,
    seed: int,
    batch_size: int = 128,
) -> nn.Module:
    """Adam (lr 1e-3) on cross-entropy for ``epochs`` passes; returns the model in eval mode.

    Everything random is drawn from ``seed``: the initial weights, the batch order and the
    CNN's dropout masks (from the global generator, seeded here and restored afterwards), so
    the result does not depend on what ran before in the process (a cached control and a
    freshly scored one agree)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = {"mlp": mlp, "cnn": cnn}[name](num_classes)
        images, labels = _unit(train[0]), train[1].long()
        order_rng = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model.train()
        batches = epochs * ((images.shape[0] + batch_size - 1) // batch_size)
        with tqdm(total=batches, desc=name, unit="batch", leave=False) as bar:
            for _ in range(epochs):
                for idx in torch.randperm(images.shape[0], generator=order_rng).split(batch_size):
                    loss = F.cross_entropy(model(images[idx]), labels[idx])
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    bar.update()
    return model.eval()


@torch.no_grad()
def predict_torch(model: nn.Module, images: torch.Tensor, batch_size: int = 1000) -> np.ndarray:
    return torch.cat([model(_unit(x)).argmax(1) for x in images.split(batch_size)]).numpy()


def sklearn_estimator(name: str, seed: int):
    """A scikit-learn (or XGBoost) classifier with default hyper-parameters."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.ensemble import (
        AdaBoostClassifier,
        BaggingClassifier,
        GradientBoostingClassifier,
        RandomForestClassifier,
    )
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import BernoulliNB, GaussianNB
    from sklearn.svm import LinearSVC
    from sklearn.tree import DecisionTreeClassifier

    factories = {
        "adaboost": AdaBoostClassifier,
        "bagging": BaggingClassifier,
        "bernoulli-nb": BernoulliNB,
        "decision-tree": DecisionTreeClassifier,
        "gaussian-nb": GaussianNB,
        "gradient-boosting": GradientBoostingClassifier,
        "lda": LinearDiscriminantAnalysis,
        "linear-svc": LinearSVC,
        "logistic-regression": LogisticRegression,
        "random-forest": RandomForestClassifier,
    }
    if name == "xgboost":
        from xgboost import XGBClassifier

        factories["xgboost"] = XGBClassifier
    estimator = factories[name]()
    if "random_state" in estimator.get_params():
        estimator.set_params(random_state=seed)
    return estimator


def available(name: str) -> bool:
    """Whether ``name`` can run here (XGBoost is optional)."""
    if name not in CLASSIFIER_NAMES:
        return False
    return name not in OPTIONAL_CLASSIFIERS or importlib.util.find_spec(name) is not None


def fit_predict(
    name: str,
    train: Arrays,
    test_images: torch.Tensor,
    num_classes: int,
    epochs: int,
    seed: int,
) -> np.ndarray:
    """Train classifier ``name`` on ``train`` and predict labels of ``test_images``."""
    if name in TORCH_CLASSIFIERS:
        model = fit_torch(name, train, num_classes, epochs, seed)
        return predict_torch(model, test_images)
    estimator = sklearn_estimator(name, seed)
    features = _unit(train[0]).flatten(1).numpy()
    labels = train[1].numpy()
    with warnings.catch_warnings():
        # default hyper-parameters, as in the paper: some stop before converging, by design
        warnings.simplefilter("ignore")
        estimator.fit(features, labels)
        return np.asarray(estimator.predict(_unit(test_images).flatten(1).numpy()))
