"""The toy registry entry (``FEDGS_ALGORITHMS=toy_algorithm.entry:TOY``) and bad entries for
the registration's unit tests."""

from fedgs.algorithms import Algorithm
from fedgs.privacy.threat_models import REPLACE_ONE, TRUSTED_AGGREGATOR

TOY = Algorithm(
    "toy",
    "train.toy",
    TRUSTED_AGGREGATOR,
    REPLACE_ONE,
    noise_key="datalens-noise-std",  # its noise: the Gaussian noise on the vote sum
    server_run="toy_algorithm.run:ToyRun",
    client_session="toy_algorithm.session:ToyTeacher",
    warm_start_session="fedgs.client.critic_session:CriticSession",  # teachers are critics
)

NOT_AN_ALGORITHM = "toy"
CLASHING_NAME = Algorithm(
    "datalens", "train.toy2", TRUSTED_AGGREGATOR, REPLACE_ONE, "datalens-noise-std", "", "", None
)
CLASHING_QUERY = Algorithm(
    "toy2", "train.datalens", TRUSTED_AGGREGATOR, REPLACE_ONE, "datalens-noise-std", "", "", None
)
BAD_QUERY = Algorithm(
    "toy3", "toy", TRUSTED_AGGREGATOR, REPLACE_ONE, "datalens-noise-std", "", "", None
)
WARM_CLASH = Algorithm(
    "toy4", "train.warmstart", TRUSTED_AGGREGATOR, REPLACE_ONE, "datalens-noise-std", "", "", None
)
IDENTIFY_CLASH = Algorithm(
    "toy5", "train.identify", TRUSTED_AGGREGATOR, REPLACE_ONE, "datalens-noise-std", "", "", None
)
