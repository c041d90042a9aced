"""The rules of the `dp` block (declared by the mechanism, `core.privacy.FIELDS`) against the
rest of the config, and the run's privacy as the config decides it: whether it is private
(`private`, `own_privacy`), the accountant 'auto' resolves to (`dp_accountant`) and the
engine's sampler (`sampling`). `training.fields.validate` runs `RULES`.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from fedjax_sharp.hyperparameters import require as _check
from fedjax_sharp.minimax.tasks import is_minimax

# (config) -> None, raising ConfigError naming the field (run by `fields.validate`).
RULES: list[Callable[[Any], None]] = []
rule = RULES.append


def own_privacy(config) -> bool:
  """Whether the selected algorithm applies its own clipping and noise (DP-FedSAM:
  `Registration.private`)."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  name = config.algorithm.name
  return not is_minimax(config) and name in ALGORITHMS and ALGORITHMS[name].private


def private(config) -> bool:
  """Whether the run applies client-level DP: `dp.enabled`, or an algorithm that applies its
  own."""
  return bool(config.dp.enabled) or own_privacy(config)


def dp_accountant(config) -> str:
  """`dp.accountant` with 'auto' resolved: 'rdp' (fixed-size cohorts without replacement, the
  engine's 'fixed' sampler) or 'pld_poisson' (exact for the engine's 'poisson' sampler)."""
  value = str(config.dp.accountant)
  if value != "auto":
    return value
  return "pld_poisson" if sampling(config) == "poisson" else "rdp"


def sampling(config) -> str:
  """The engine's cohort sampler, `engine.sampling` ('fixed' | 'poisson')."""
  return str(config.engine.sampling)


# The dp fields that describe the mechanism (for an algorithm with its own DP, the resolved
# config copies them from its block: config.json then records what the run applied).
MECHANISM_FIELDS = ("clip_norm", "noise_multiplier", "clip", "noise")


def own_mechanism_recorded(config) -> bool:
  """Whether `dp.enabled` of an own-DP algorithm is the resolved config's record of its
  mechanism (`config.resolved_setting`): every mechanism field equals the algorithm's."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  block = ALGORITHMS[config.algorithm.name].values(config)
  return all(config.dp[k] == block[k] for k in MECHANISM_FIELDS)


@rule
def _privacy(config) -> None:
  dp = config.dp
  if dp.enabled:
    _check(not is_minimax(config), "dp.enabled", f"applies to classification; task.name="
           f"{config.task.name!r} (minimax) has no DP mechanism: leave it False")
    _check(not own_privacy(config) or own_mechanism_recorded(config), "dp.enabled",
           f"algorithm.name={config.algorithm.name!r} applies its own clipping and noise "
           f"(config.algorithm.{config.algorithm.name}): leave dp.enabled False")
    _check(dp.noise_multiplier == 0 or math.isfinite(dp.clip_norm), "dp.clip_norm",
           f"must be finite when dp.noise_multiplier > 0 (the noise std is sigma * C), got "
           f"{dp.clip_norm}")
  if dp.target_epsilon is not None:
    _check(bool(dp.enabled), f"dp.target_epsilon={dp.target_epsilon:g}",
           "is set but dp.enabled is False"
           + (f" (algorithm.name={config.algorithm.name!r} applies its own noise: set "
              f"algorithm.{config.algorithm.name}.noise_multiplier)" if own_privacy(config)
              else ": add --config.dp.enabled=True, or unset dp.target_epsilon"))
    _check(dp.noise_multiplier is None or own_privacy(config),
           f"dp.target_epsilon={dp.target_epsilon:g}",
           f"and dp.noise_multiplier={dp.noise_multiplier} are both set: the noise multiplier "
           f"is solved from the target; set only one of them")
  if dp.noise_cohort_size is not None:
    _check(bool(dp.enabled) and not own_privacy(config), "dp.noise_cohort_size",
           "applies to dp.enabled's mechanism: set dp.enabled=True"
           + (f" (algorithm.name={config.algorithm.name!r} applies its own noise)"
              if own_privacy(config) else ""))
    _check(dp.noise_cohort_size >= config.clients_per_round,
           f"dp.noise_cohort_size={dp.noise_cohort_size}",
           f"must be >= clients_per_round={config.clients_per_round} (it simulates a larger "
           f"cohort's noise)")
  if private(config):
    _check(str(config.aggregation) != "examples", "aggregation",
           "='examples' weighs clients by their example counts, which the DP sensitivity bound "
           "does not cover: use 'uniform' (or 'auto') with differential privacy")
    if dp.target_epsilon is not None:
      _check(int(config.data.num_clients) > 0, "dp.target_epsilon",
             "needs data.num_clients > 0 (the sampling rate clients_per_round / num_clients)")


def _algorithm_reads_cohort_size(config) -> str:
  """The selected algorithm's `FederatedAlgorithm.reads_cohort_size` (built from the config
  without a model: the factories only close over `apply_fn`)."""
  from fedjax_sharp.algorithms.registry import ALGORITHMS
  return ALGORITHMS[config.algorithm.name].build(config, None).reads_cohort_size


@rule
def _sampling(config) -> None:
  """Poisson sampling: classification only; under DP, server noise (the fixed-denominator mean)
  and an algorithm that does not read the realised cohort size."""
  if sampling(config) != "poisson":
    return
  _check(not is_minimax(config), "engine.sampling",
         f"='poisson' applies to classification; task.name={config.task.name!r} (minimax) "
         f"samples fixed cohorts: leave it 'fixed'")
  if not private(config):
    return
  _check(dp_accountant(config) != "rdp", "dp.accountant",
         "='rdp' accounts for fixed-size cohorts; with engine.sampling='poisson' use "
         "'pld_poisson' or 'rdp_poisson' (or 'auto')")
  name = config.algorithm.name
  noise_field = "dp.noise" if config.dp.enabled else f"algorithm.{name}.noise"
  noise = config.dp.noise if config.dp.enabled else config.algorithm[name].get("noise", "server")
  _check(noise != "client", noise_field,
         f"='client' with engine.sampling='poisson': each client's share sigma^2 C^2 / m of "
         f"the noise would sum to a variance that depends on the realised cohort size; use "
         f"{noise_field}='server' (or engine.sampling='fixed')")
  why = _algorithm_reads_cohort_size(config)
  _check(not why, "engine.sampling",
         f"='poisson' with differential privacy: algorithm.name={name!r} {why}, which the "
         f"fixed-denominator mean does not cover; use engine.sampling='fixed'")
