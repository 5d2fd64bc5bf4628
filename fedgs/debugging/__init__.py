"""The flipped-pixel debugging scenario, in small parts.

`bug` injects the pre-processing bug, `writers` cuts writers into the classifier's held-out set
and the federated population, `scoring` scores writers and splits them into groups, `detection`
measures inversion on images, `report` writes the figure and the markdown. The orchestration is
`fedgs.simulations.debug_scenario`, the command `fedgs.simulations.debug_cli` (the core never
imports the simulations layer). Importing this package imports nothing heavy (the command's
parser reads it).
"""
