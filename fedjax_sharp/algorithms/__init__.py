"""Federated algorithms, one module per paper acronym, and a registry keyed by config names."""
from fedjax_sharp.algorithms.common import local_sgd, with_learning_rate
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.hyperparameters import Field
from fedjax_sharp.algorithms.registry import ALGORITHMS, build_algorithm, register

__all__ = ["ALGORITHMS", "Field", "build_algorithm", "register", "fed_avg", "local_sgd",
           "with_learning_rate"]
