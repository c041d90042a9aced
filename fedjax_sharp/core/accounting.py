"""Privacy accounting of `core.privacy`'s mechanism (Google's `dp-accounting`, imported only
when a run accounts): epsilon after T rounds, the noise multiplier a target epsilon needs, the
threat models a run reports.

The composition over rounds of a subsampled Gaussian mechanism with
noise multiplier `sigma / s` relative to the sensitivity (`s = 1` for 'global' clipping,
`s = sqrt(L)` for 'per_tensor' with `L` tensors; DP-FedSAM's own script ignores that factor):
  'rdp'          RDP of sampling WITHOUT replacement of m of the M clients (the engine's 'fixed'
                 sampler; Wang, Balle & Kasiviswanathan 2019), replace-one neighbouring
                 datasets: the sum's sensitivity is 2C, so the event's multiplier is sigma/(2s);
  'rdp_poisson'  RDP of Poisson sampling with q = m/M, add/remove-one (the usual DP-FedAvg and
                 DP-FedSAM accounting; an approximation of fixed-size cohorts, exact for the
                 engine's 'poisson' sampler);
  'pld_poisson'  the same Poisson event with privacy loss distributions (tighter; dp-accounting's
                 PLD accountant has no sampling-without-replacement event).
An algorithm with E exchanges per round releases E aggregates per round (E steps per round).
`dpfedsam_epsilon` is DP-FedSAM's own RDP -> (epsilon, delta) conversion (eps_computer.py).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any

import numpy as np

from fedjax_sharp.core import privacy
from fedjax_sharp.core.algorithm import FederatedAlgorithm
from fedjax_sharp.core.cohort import SAMPLINGS
from fedjax_sharp.core.privacy import num_tensors, upload_shape
from fedjax_sharp.errors import ConfigError

ACCOUNTANTS = tuple(a for a in privacy.FIELDS["accountant"].field.choices if a != "auto")
# The noise multipliers target_epsilon may solve for: above 1e4 (noise std 10^4 C per
# coordinate) no update survives, so such a target is refused as unreachable.
MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER = 1e-3, 1e4


def _log_add(a: float, b: float) -> float:
  hi, lo = max(a, b), min(a, b)
  return hi if lo == -math.inf else hi + math.log1p(math.exp(lo - hi))


def _log_sub(a: float, b: float) -> float:
  """log(exp(a) - exp(b)) for a >= b."""
  if b == -math.inf:
    return a
  return a + math.log(-math.expm1(b - a)) if a > b else -math.inf


def _log_erfc(x: float) -> float:
  from scipy import special  # pylint: disable=g-import-not-at-top
  return math.log(2.0) + float(special.log_ndtr(-x * math.sqrt(2.0)))


def sgm_rdp(q: float, sigma: float, order: float) -> float:
  """RDP at `order` of one Poisson-subsampled Gaussian mechanism (rate `q`, noise multiplier
  `sigma`): Mironov, Talwar & Zhang 2019, Section 3.3, the series for fractional orders summed
  until its terms fall below exp(-30), in log space. The computation DP-FedSAM's
  eps_computer.py (`_compute_log_a_frac`, vendored from Opacus) does; dp-accounting's own
  version stops after 1000 terms and drops the orders near 1 for which that is not enough."""
  from scipy import special  # pylint: disable=g-import-not-at-top
  if q == 0:
    return 0.0
  if q == 1.0:
    return order / (2 * sigma ** 2)
  log_a0 = log_a1 = -math.inf
  z0 = sigma ** 2 * math.log(1 / q - 1) + 0.5
  i = 0
  while True:
    coef = special.binom(order, i)
    log_coef = math.log(abs(coef))
    j = order - i
    log_s0 = (log_coef + i * math.log(q) + j * math.log(1 - q) + (i * i - i) / (2 * sigma ** 2)
              + math.log(0.5) + _log_erfc((i - z0) / (math.sqrt(2) * sigma)))
    log_s1 = (log_coef + j * math.log(q) + i * math.log(1 - q) + (j * j - j) / (2 * sigma ** 2)
              + math.log(0.5) + _log_erfc((z0 - j) / (math.sqrt(2) * sigma)))
    if coef > 0:
      log_a0, log_a1 = _log_add(log_a0, log_s0), _log_add(log_a1, log_s1)
    else:
      log_a0, log_a1 = _log_sub(log_a0, log_s0), _log_sub(log_a1, log_s1)
    i += 1
    if max(log_s0, log_s1) < -30:
      break
  return _log_add(log_a0, log_a1) / (order - 1)


def dpfedsam_epsilon(noise_multiplier: float, steps: int, sampling_rate: float, delta: float,
                     orders=None) -> tuple[float, float]:
  """DP-FedSAM's own accountant (eps_computer.py L223-319 at YMJS-Irfan/DP-FedSAM@016bd7f):
  the RDP of `steps` Poisson-subsampled Gaussian mechanisms (`sgm_rdp`) at the orders
  `arange(1.01, 100, 0.05)`, converted to (epsilon, delta) with Balle et al. 2020, Thm 21:

      eps = min over a of  rdp(a) - (log(delta) + log(a)) / (a - 1) + log((a - 1) / a)

  Returns (epsilon, the best order)."""
  orders = np.arange(1.01, 100.0, 0.05) if orders is None else np.asarray(orders, float)
  rdp = np.array([steps * sgm_rdp(sampling_rate, noise_multiplier, float(a)) for a in orders])
  eps = rdp - (np.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)
  best = int(np.nanargmin(eps))
  return float(eps[best]), float(orders[best])


def dpfedsam_moments_bound(noise_multiplier: float, steps: int, sampling_rate: float,
                           delta: float) -> float:
  """The closed form eps_computer.py also prints: 2 q sqrt(T log2(1/delta)) / sigma (log2 as
  in the script, L322-327)."""
  return 2 * sampling_rate * math.sqrt(steps * math.log2(1 / delta)) / noise_multiplier


@dataclasses.dataclass(frozen=True)
class AccountingSetting:
  """What the accountant needs: the mechanism's noise multiplier relative to the clipped
  upload's sensitivity, the cohort sampling and the releases per round.

  One round is ONE sampling event (the cohort is drawn once) around the round's releases: an
  algorithm with E exchanges per round (NaiveFedGloSS: 2) releases E noised aggregates of the
  same cohort, and E Gaussian mechanisms of multiplier sigma on the same data compose to one
  Gaussian of multiplier sigma / sqrt(E) (their privacy losses add; adaptively chosen inputs
  change nothing). Composing E independently sampled events instead would understate epsilon."""
  noise_multiplier: float       # sigma of the mechanism
  cohort: int                   # m, clients per round (the expected cohort under Poisson)
  population: int               # M, all clients
  delta: float
  accountant: str = "rdp"
  sensitivity: float = 1.0      # in units of C: 1 ('global'), sqrt(L) ('per_tensor')
  releases_per_round: int = 1   # E, the algorithm's exchanges per round
  sampling: str = "fixed"       # the engine's cohort sampler: 'fixed' | 'poisson'
  # 'client' noise: the multiplier of the noise one upload carries alone (sigma / sqrt(m)), what
  # a server that sees individual uploads faces (0 with 'server' noise: the upload is bare).
  local_noise_multiplier: float = 0.0
  # `dp.noise_cohort_size`: what the run simulates ("a cohort of N of M' clients"; cohort and
  # population above are then N and M' = M N / m, at the run's own sampling rate m / M).
  simulates: str = ""

  def __post_init__(self):
    if self.accountant not in ACCOUNTANTS:
      raise ConfigError(f"dp.accountant={self.accountant!r} is not one of {list(ACCOUNTANTS)}")
    if self.sampling not in SAMPLINGS:
      raise ConfigError(f"engine.sampling={self.sampling!r} is not one of {list(SAMPLINGS)}")
    if self.sampling == "poisson" and self.accountant == "rdp":
      raise ConfigError("dp.accountant='rdp' accounts for fixed-size cohorts; with "
                        "engine.sampling='poisson' use 'pld_poisson' or 'rdp_poisson' (or 'auto')")
    if not 0 < self.delta < 1:
      raise ConfigError(f"dp.delta must be in (0, 1), got {self.delta}")
    if not 1 <= self.cohort <= self.population:
      raise ValueError(f"cohort {self.cohort} not in [1, {self.population}]")
    if self.releases_per_round < 1:
      raise ValueError(f"releases_per_round must be >= 1, got {self.releases_per_round}")

  @property
  def sampling_rate(self) -> float:
    return self.cohort / self.population

  def round_noise_multiplier(self, noise_multiplier: float | None = None) -> float:
    """The multiplier of one round's Gaussian relative to the sum's sensitivity: sigma / s
    (add/remove-one) or sigma / (2 s) (replace-one, 'rdp'), over sqrt(E) for E releases."""
    sigma = self.noise_multiplier if noise_multiplier is None else noise_multiplier
    sensitivity = self.sensitivity * (2.0 if self.accountant == "rdp" else 1.0)
    return sigma / (sensitivity * math.sqrt(self.releases_per_round))

  def event(self, rounds: int, noise_multiplier: float | None = None):
    """The dp-accounting event of `rounds` rounds: one sampled Gaussian per round."""
    import dp_accounting  # pylint: disable=g-import-not-at-top
    gaussian = dp_accounting.GaussianDpEvent(self.round_noise_multiplier(noise_multiplier))
    if self.accountant == "rdp":   # replace-one: the sum moves by up to 2 C s
      one = dp_accounting.SampledWithoutReplacementDpEvent(self.population, self.cohort,
                                                           gaussian)
    else:
      one = dp_accounting.PoissonSampledDpEvent(self.sampling_rate, gaussian)
    return dp_accounting.SelfComposedDpEvent(one, int(rounds))

  def fresh_accountant(self):
    import dp_accounting  # pylint: disable=g-import-not-at-top
    relation = dp_accounting.NeighboringRelation
    if self.accountant == "rdp":
      return dp_accounting.rdp.RdpAccountant(neighboring_relation=relation.REPLACE_ONE)
    if self.accountant == "rdp_poisson":
      return dp_accounting.rdp.RdpAccountant()
    return dp_accounting.pld.PLDAccountant()

  def epsilon(self, rounds: int, noise_multiplier: float | None = None) -> float:
    """epsilon(delta) after `rounds` rounds (inf without noise)."""
    sigma = self.noise_multiplier if noise_multiplier is None else noise_multiplier
    if rounds <= 0:
      return 0.0
    if sigma <= 0:
      return math.inf
    return _epsilon(self, int(rounds), float(sigma))

  def local_epsilon(self, rounds: int) -> float:
    """epsilon(delta) of one client's own uploads against a server that sees them one by one
    ('client' noise without secure aggregation): `rounds` releases of its upload with the
    local noise multiplier, every round (the worst case: the client sampled each time) and
    without amplification by sampling (the server knows whom it sampled). inf with 'server'
    noise, where one upload carries no noise at all."""
    if rounds <= 0:
      return 0.0
    if self.local_noise_multiplier <= 0:
      return math.inf
    local = dataclasses.replace(self, cohort=self.population, noise_multiplier=0.0,
                                sampling="fixed" if self.accountant == "rdp" else "poisson")
    return _epsilon(local, int(rounds), float(self.local_noise_multiplier))

  def solve_noise_multiplier(self, target_epsilon: float, rounds: int) -> float:
    """The smallest noise multiplier whose epsilon(delta) after `rounds` rounds is at most
    `target_epsilon`, to a relative 1e-4, in bounded memory: bracketed with RDP (cheap at any
    sigma; `rdp_poisson`'s bound for the PLD accountant, whose epsilon it never undercuts),
    then bisected with the accountant asked for, which never evaluates a PLD far below the
    answer (a PLD at sigma 1e-3 would take tens of GB). ConfigError (one line) when the target
    needs a noise multiplier above MAX_NOISE_MULTIPLIER."""
    target, rounds = float(target_epsilon), int(rounds)
    if not target > 0 or rounds < 1:
      raise ConfigError(f"dp.target_epsilon must be > 0 over >= 1 round, got {target_epsilon} "
                        f"over {rounds}")
    _quiet_series_warnings()
    bracket = (self if self.accountant != "pld_poisson"
               else dataclasses.replace(self, accountant="rdp_poisson"))
    hi = 1.0
    while bracket.epsilon(rounds, hi) > target:
      hi *= 2.0
      if hi > MAX_NOISE_MULTIPLIER:
        raise ConfigError(
            f"dp.target_epsilon={target:g} cannot be met over {rounds} rounds at delta "
            f"{self.delta:g}: it needs a noise multiplier above {MAX_NOISE_MULTIPLIER:g}; allow "
            f"a larger epsilon, fewer rounds or a larger population")
    lo = hi / 2.0
    while lo > MIN_NOISE_MULTIPLIER and bracket.epsilon(rounds, lo) <= target:
      hi, lo = lo, lo / 2.0
    if self is not bracket:   # the PLD's epsilon is at most RDP's: the answer is <= hi
      lo = hi / 2.0
      while lo > MIN_NOISE_MULTIPLIER and self.epsilon(rounds, lo) <= target:
        hi, lo = lo, lo / 2.0
    while hi - lo > 1e-4 * hi:
      mid = 0.5 * (lo + hi)
      if self.epsilon(rounds, mid) <= target:
        hi = mid
      else:
        lo = mid
    return hi


class _DropSeriesWarnings(logging.Filter):
  """dp-accounting warns, at every call, that its series for orders near 1 did not converge in
  1000 terms and that it drops those orders (the result stays an upper bound): once is enough."""

  seen = False

  def filter(self, record) -> bool:
    if "failed to converge" not in record.getMessage():
      return True
    first, _DropSeriesWarnings.seen = not _DropSeriesWarnings.seen, True
    return first


@functools.lru_cache(maxsize=1)
def _quiet_series_warnings() -> None:
  logging.getLogger("absl").addFilter(_DropSeriesWarnings())


@functools.lru_cache(maxsize=64)
def _one_round(setting: AccountingSetting, sigma: float):
  """One round's privacy loss, computed once: RDP (orders, rdp) or the PLD."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  _quiet_series_warnings()
  if setting.accountant == "pld_poisson":   # as dp-accounting's PLDAccountant builds it
    return dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=setting.round_noise_multiplier(sigma),
        value_discretization_interval=1e-4, sampling_prob=setting.sampling_rate)
  accountant = setting.fresh_accountant()
  accountant.compose(setting.event(1, sigma))
  return np.asarray(accountant.orders, float), np.asarray(accountant.rdp, float)


@functools.lru_cache(maxsize=4096)
def _epsilon(setting: AccountingSetting, rounds: int, sigma: float) -> float:
  """epsilon(delta) of `rounds` rounds: the RDP of one round times `rounds` (RDP composes
  additively), or the one-round PLD composed `rounds` times; computed from the round count
  alone, so a resumed run reports the same values."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  one = _one_round(setting, sigma)
  if setting.accountant == "pld_poisson":
    return float(one.self_compose(rounds).get_epsilon_for_delta(setting.delta))
  orders, rdp = one
  return float(dp_accounting.rdp.compute_epsilon(orders, rounds * rdp, setting.delta)[0])


def accounting_setting(algorithm: FederatedAlgorithm, params, cohort: int, population: int,
                       delta: float, accountant: str = "rdp", sampling: str = "fixed",
                       noise_cohort_size: int | None = None) -> AccountingSetting | None:
  """The accounting of `algorithm`'s DP mechanism (None without one). With
  `noise_cohort_size` N the run simulates a cohort of N: the accountant sees N clients drawn
  from M N / m at the run's rate m / M."""
  mechanism = algorithm.privacy
  if mechanism is None:
    return None
  simulates = ""
  if noise_cohort_size:
    simulated = int(round(int(population) * int(noise_cohort_size) / int(cohort)))
    simulates = (f"a cohort of {int(noise_cohort_size)} from {simulated} clients (the run: "
                 f"{int(cohort)} of {int(population)})")
    cohort, population = int(noise_cohort_size), simulated
  sensitivity = 1.0
  if mechanism.clip == "per_tensor":
    sensitivity = math.sqrt(num_tensors(upload_shape(algorithm, params)))
  local = (mechanism.update_noise_multiplier / math.sqrt(int(cohort))
           if mechanism.noise == "client" else 0.0)
  return AccountingSetting(noise_multiplier=mechanism.noise_multiplier, cohort=int(cohort),
                           population=int(population), delta=float(delta),
                           accountant=accountant, sensitivity=sensitivity,
                           releases_per_round=int(algorithm.exchanges), sampling=sampling,
                           local_noise_multiplier=local, simulates=simulates)


# What each noise placement protects against (docs/privacy.md, "Threat models").
THREAT_MODELS = {
    "server": "central DP: a trusted server adds the noise to the sum of the clipped uploads; "
              "each upload it receives is unprotected",
    "client": "distributed DP: each client noises its own upload; epsilon holds only if the "
              "server sees just the sum (secure aggregation, no dropouts)",
}


def describe(setting: AccountingSetting) -> dict[str, Any]:
  """The accounting's parameters, for summaries and logs."""
  return {"delta": setting.delta, "noise_multiplier": setting.noise_multiplier,
          "accountant": setting.accountant, "sampling": setting.sampling,
          "sampling_rate": setting.sampling_rate, "sensitivity": setting.sensitivity,
          "releases_per_round": setting.releases_per_round,
          "threat_model": THREAT_MODELS["client" if setting.local_noise_multiplier > 0
                                        else "server"],
          "local_noise_multiplier": setting.local_noise_multiplier,
          "cohort": setting.cohort, "population": setting.population,
          **({"simulates": setting.simulates} if setting.simulates else {})}
