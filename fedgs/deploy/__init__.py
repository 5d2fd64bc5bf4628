"""Real multi-process deployment: SuperLink, SuperNodes and the app as separate processes.

``topology`` describes the processes and their flags once; the local launcher and
docker-compose.yml are both generated from it so they stay in step.
"""
