"""Algorithm registry: config `algorithm.name` -> builder(config, apply_fn) -> FederatedAlgorithm.

Every builder reads its hyperparameters from its block `config.algorithm.<name>`, the local optimiser from
`config.local` and the server optimiser from `config.server`.
"""
from __future__ import annotations

from typing import Callable

from fedjax_sharp.algorithms import common
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_dyn import build_fed_dyn
from fedjax_sharp.algorithms.fed_gmt import build_fed_gmt, build_fed_gmt_v2
from fedjax_sharp.core.algorithm import FederatedAlgorithm

Builder = Callable[..., FederatedAlgorithm]


def client_optimizer_from_config(config):
  local = config.local
  return common.local_sgd(momentum=local.momentum, weight_decay=local.weight_decay)


def server_optimizer_from_config(config):
  s = config.server
  return common.server_optimizer_from_config(s.optimizer, s.lr, momentum=s.get("momentum", 0.0))


def _build_fedavg(config, apply_fn):
  return fed_avg(apply_fn, client_optimizer_from_config(config),
                 server_optimizer_from_config(config))


ALGORITHMS: dict[str, Builder] = {
    "fedavg": _build_fedavg,
    "feddyn": build_fed_dyn,
    "fedgmt": build_fed_gmt,
    "fedgmt_v2": build_fed_gmt_v2,
}


def register(name: str, builder: Builder) -> None:
  ALGORITHMS[name] = builder


def build_algorithm(config, apply_fn) -> FederatedAlgorithm:
  name = config.algorithm.name
  if name not in ALGORITHMS:
    raise ValueError(f"algorithm.name={name!r} is not one of {sorted(ALGORITHMS)}")
  return ALGORITHMS[name](config, apply_fn)
