"""The names `load_federated` accepts, in a module that imports nothing.

Why: the ``fedgs`` parser offers them as ``choices=``, and building it must not import torch,
``datasets`` or pyarrow (seconds) just to print ``--help``. `fedgs.data.leaf` and
`fedgs.data.partition` import their names from here.
"""

DATASET_NAMES = ("embedded", "femnist", "mnist", "saved")
SAVED = "saved"  # a folder written by save_federated (e.g. a debugging scenario group)
LABEL_MODES = ("digits", "merged36", "all62")
LABEL_CLASSES = {"digits": 10, "merged36": 36, "all62": 62}  # classes of each FEMNIST label mode
PARTITIONS = ("iid", "label-skew")
NATURAL = "natural"  # FEMNIST's only partition: one client per writer
