"""Empirical privacy audits: canary clients put next to the accountant's epsilon (``fedgs audit``).

``runs`` drives the real mechanisms with canaries, ``stats`` turns scores into an estimate and a
lower bound, ``report`` gives the verdict, ``sabotage`` breaks the noise on purpose (tests only).
"""
