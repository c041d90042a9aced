"""Host-side cohort sampling and data plans with fixed shapes `[C, S, B]`.

Randomness comes from NumPy generators seeded by `(seed, stream, round[, client])`, so a round's
cohort and batch order depend only on the seed and the round (resuming or changing the execution
strategy never changes them).

Two samplers (`engine.sampling`):
  'fixed'    m = clients_per_round of the M clients, uniformly without replacement;
  'poisson'  every client joins independently with probability q = m / M, so the realised
             cohort size n ~ Binomial(M, q) varies from round to round (0 included). Drawn in two
             steps from the round's generator, n ~ Binomial(M, q) and then n clients uniformly
             without replacement: the same distribution over subsets (P(S) = q^|S| (1-q)^(M-|S|)
             either way), and a round's size costs one draw, not M (`cohort_size`).
A Poisson cohort is padded to a fixed number of clients, `max_cohort`: the smallest k with
P(Binomial(M, q) > k) <= POISSON_TAIL (`poisson_max_cohort`), so one compiled round serves
practically every round. A draw above it is never cut: from that round on the cohort is padded
to the largest draw so far (one more compile, logged once), a function of the round alone, so a
resumed run pads (and computes) exactly as an uninterrupted one.

Aggregation weights: 'examples' (n_m / sum n) or 'uniform' (1 / n) over the realised cohort; with
`fixed_denominator` (differential privacy) every real client of a drawn cohort weighs 1 / (q M)
= 1 / clients_per_round whatever n is (TFF's DP-FedAvg): the weighted sum is then the
fixed-denominator mean, whose sensitivity does not depend on n (under 'fixed' sampling n = m, so
this is 'uniform'). An empty Poisson draw with `fixed_denominator` keeps one padding slot
(client id M, no data, no steps) at weight 1 / (q M): the DP mechanism (`core.privacy.with_dp`)
puts the round's noise there, so an empty round still releases noise / (q M) as the accounted
mechanism does. Without it an empty cohort has all weights 0, and the engine leaves the server
state unchanged (`RoundEngine`).
"""
from __future__ import annotations

import collections.abc
import math
import threading
from typing import Sequence

from absl import logging
import numpy as np

from fedjax_sharp.core import execution, tree
from fedjax_sharp.core.engine import Cohort

STREAM_SAMPLING = 1
STREAM_DATA_ORDER = 2
WEIGHTINGS = ("examples", "uniform")   # the client weights a round may use (`aggregation`)
SAMPLINGS = execution.FIELDS["sampling"].field.choices   # engine.sampling's values
# P(a Poisson draw exceeds the padded cohort): one round in a million compiles once more.
POISSON_TAIL = 1e-6


def poisson_max_cohort(num_clients: int, clients_per_round: int,
                       tail: float = POISSON_TAIL) -> int:
  """The smallest k >= 1 with P(Binomial(M, q) > k) <= `tail`, q = clients_per_round / M (M
  when q = 1): the padded size of a Poisson cohort. M = 100, m = 10: 27; M = 1000, m = 50: 86."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  big_m, q = int(num_clients), clients_per_round / num_clients
  if q >= 1:
    return big_m
  k = int(min(max(stats.binom.isf(tail, big_m, q), 0), big_m))
  while k < big_m and stats.binom.sf(k, big_m, q) > tail:     # isf is exact; guard its rounding
    k += 1
  while k > 0 and stats.binom.sf(k - 1, big_m, q) <= tail:
    k -= 1
  return max(k, 1)


def num_local_steps(num_examples: int, batch_size: int, epochs: int, steps: int) -> int:
  """K_m: `steps` if > 0, else `epochs * ceil(n_m / B)` (the last partial batch is kept)."""
  if steps > 0:
    return steps
  return epochs * math.ceil(num_examples / batch_size)


class ClientSlices(collections.abc.Sequence):
  """The examples of M clients as ranges of the training set, in two integer arrays instead of
  M index arrays: client m holds examples `starts[m] .. starts[m] + sizes[m] - 1` (modulo
  `num_examples` when given: many clients sharing a smaller pool of examples, as the population
  benchmark's do). `starts` defaults to the running sum of `sizes` (a training set stored
  grouped by client). 8 bytes per client (12 past 2^31 examples): a sampler of 10^7 clients
  holds 80 MB of partition (and 40 MB of step counts), not 10^7 arrays (2.7 GB)."""

  def __init__(self, sizes, starts=None, num_examples: int | None = None):
    self.sizes = np.asarray(sizes, np.int32)
    if starts is None:
      total = int(self.sizes.sum(dtype=np.int64))
      self.starts = np.zeros(len(self.sizes), np.int32 if total < 2 ** 31 else np.int64)
      np.cumsum(self.sizes[:-1], out=self.starts[1:])
    else:
      starts = np.asarray(starts)
      self.starts = starts.astype(np.int32 if starts.size and starts.max() < 2 ** 31
                                  else np.int64)
    if self.starts.shape != self.sizes.shape:
      raise ValueError(f"ClientSlices: {len(self.starts)} starts for {len(self.sizes)} sizes")
    self.num_examples = num_examples

  def __len__(self) -> int:
    return len(self.sizes)

  def __getitem__(self, m: int) -> np.ndarray:
    ix = int(self.starts[m]) + np.arange(self.sizes[m], dtype=np.int64)
    return ix % self.num_examples if self.num_examples else ix


class CohortSampler:
  """Samples cohorts ('fixed' or 'poisson', the module docstring) and builds their padded data
  plans.

  Args:
    client_indices: for each of the M clients, the indices of its training examples (a list
      of arrays, or a `ClientSlices` for populations of millions).
    clients_per_round: m, the cohort size ('fixed') or its expectation q M ('poisson').
    batch_size: B.
    local_epochs: E, used when `local_steps == 0`.
    local_steps: fixed K for every client (0: use epochs).
    seed: experiment seed.
    weighting: 'examples' (n_m / sum n) or 'uniform'.
    max_steps: S; default the largest K_m over all clients, so shapes never change.
    sampling: 'fixed' | 'poisson'.
    fixed_denominator: weights 1 / clients_per_round for the real clients of a drawn cohort
      (differential privacy; needs 'uniform').
    max_cohort: 'poisson': the padded cohort size; default `poisson_max_cohort`.
  """

  def __init__(self, client_indices: Sequence[np.ndarray], clients_per_round: int,
               batch_size: int, local_epochs: int = 1, local_steps: int = 0, seed: int = 0,
               weighting: str = "examples", max_steps: int | None = None,
               sampling: str = "fixed", fixed_denominator: bool = False,
               max_cohort: int | None = None):
    if isinstance(client_indices, ClientSlices):
      self.client_indices = client_indices
      self.client_sizes = client_indices.sizes
    else:
      self.client_indices = [np.asarray(ix, dtype=np.int64) for ix in client_indices]
      self.client_sizes = np.array([len(ix) for ix in self.client_indices], np.int64)
    self.num_clients = len(self.client_indices)
    if batch_size < 1:
      raise ValueError(f"local.batch_size must be >= 1, got {batch_size}")
    if local_steps < 0:
      raise ValueError(f"local.steps must be >= 0 (0 = use local.epochs), got {local_steps}")
    if local_steps == 0 and local_epochs < 1:
      raise ValueError(f"local.epochs must be >= 1 when local.steps == 0, got {local_epochs}")
    if not 1 <= clients_per_round <= self.num_clients:
      raise ValueError(f"clients_per_round must be in [1, data.num_clients={self.num_clients}], "
                       f"got {clients_per_round}")
    if weighting not in WEIGHTINGS:
      raise ValueError(f"aggregation={weighting!r} is not one of {list(WEIGHTINGS)}")
    if self.num_clients and self.client_sizes.min() < 1:
      raise ValueError("every client needs at least one training example")
    if sampling not in SAMPLINGS:
      raise ValueError(f"engine.sampling={sampling!r} is not one of {list(SAMPLINGS)}")
    if fixed_denominator and weighting != "uniform":
      raise ValueError(f"aggregation={weighting!r}: the fixed denominator of differential "
                       f"privacy weighs every client 1 / clients_per_round; use 'uniform'")
    self.clients_per_round = clients_per_round
    self.sampling = sampling
    self.fixed_denominator = bool(fixed_denominator)
    if sampling == "poisson":
      self.max_cohort = int(max_cohort or poisson_max_cohort(self.num_clients,
                                                            clients_per_round))
      if self.max_cohort < 1:
        raise ValueError(f"max_cohort must be >= 1, got {max_cohort}")
    else:
      self.max_cohort = clients_per_round
    # 'poisson': the padded size of rounds 0 .. len - 1 (the running maximum of the draws).
    self._padded: list[int] = []
    self._lock = threading.Lock()
    self.batch_size = batch_size
    self.local_epochs = local_epochs
    self.local_steps = local_steps
    self.seed = seed
    self.weighting = weighting
    # num_local_steps of every client, int32 (4 bytes a client).
    if local_steps > 0:
      self.steps_per_client = np.full(self.num_clients, local_steps, np.int32)
    else:
      steps = self.client_sizes.astype(np.int32)         # ceil(n_m / B) * E, in place
      steps += batch_size - 1
      steps //= batch_size
      steps *= local_epochs
      self.steps_per_client = steps
    self.max_steps = int(max_steps or self.steps_per_client.max())
    if self.max_steps < self.steps_per_client.max():
      raise ValueError(f"max_steps={self.max_steps} is smaller than the largest client's "
                       f"{self.steps_per_client.max()} local steps")

  @property
  def shape(self) -> tuple[int, int, int]:
    """(C, S, B) of a round's cohort (a 'poisson' cohort: the padded size before any larger
    draw)."""
    return (self.max_cohort, self.max_steps, self.batch_size)

  @property
  def sampling_rate(self) -> float:
    """q = clients_per_round / M."""
    return self.clients_per_round / self.num_clients

  def _generator(self, round_idx: int) -> np.random.Generator:
    return np.random.default_rng([self.seed, STREAM_SAMPLING, round_idx])

  def cohort_size(self, round_idx: int) -> int:
    """n, the number of clients drawn in round `round_idx` (m under 'fixed')."""
    if self.sampling == "fixed":
      return self.clients_per_round
    return int(self._generator(round_idx).binomial(self.num_clients, self.sampling_rate))

  def sample_clients(self, round_idx: int) -> np.ndarray:
    """The sorted ids of the clients drawn in round `round_idx`."""
    rng = self._generator(round_idx)
    if self.sampling == "fixed":
      return np.sort(rng.choice(self.num_clients, self.clients_per_round, replace=False))
    n = int(rng.binomial(self.num_clients, self.sampling_rate))   # = cohort_size(round_idx)
    return np.sort(rng.choice(self.num_clients, n, replace=False))

  def padded_size(self, round_idx: int) -> int:
    """The cohort size round `round_idx` is padded to: `max_cohort`, or under 'poisson' the
    largest draw of rounds 0 .. round_idx if that is larger (a function of the round alone)."""
    if self.sampling == "fixed":
      return self.clients_per_round
    with self._lock:
      while len(self._padded) <= round_idx:
        t = len(self._padded)
        previous = self._padded[-1] if self._padded else self.max_cohort
        self._padded.append(max(previous, self.cohort_size(t)))
      return self._padded[round_idx]

  def sampled_mask(self, rounds: int) -> np.ndarray:
    """bool [num_clients]: the clients drawn in any of rounds 0 .. rounds - 1."""
    mask = np.zeros(self.num_clients, bool)
    for t in range(rounds):
      mask[self.sample_clients(t)] = True
    return mask

  def client_plan(self, client_id: int, round_idx: int) -> tuple[np.ndarray, np.ndarray]:
    """Batches of one client for one round: (idx [S, B], mask [S, B]), real steps first."""
    ix = self.client_indices[client_id]
    n, bsz = len(ix), self.batch_size
    k = int(self.steps_per_client[client_id])
    rng = np.random.default_rng([self.seed, STREAM_DATA_ORDER, round_idx, client_id])
    batches_per_epoch = math.ceil(n / bsz)
    idx = np.zeros((self.max_steps, bsz), np.int32)
    mask = np.zeros((self.max_steps, bsz), bool)
    step = 0
    while step < k:
      perm = ix[rng.permutation(n)]
      for b in range(batches_per_epoch):
        if step >= k:
          break
        chunk = perm[b * bsz:(b + 1) * bsz]
        idx[step, :len(chunk)] = chunk
        mask[step, :len(chunk)] = True
        step += 1
    return idx, mask

  def build(self, round_idx: int, client_ids: Sequence[int] | None = None,
            pad_to: int | None = None) -> Cohort:
    """The round's Cohort (NumPy arrays): its drawn clients, padded to `padded_size` under
    'poisson'. `client_ids`: these clients instead (weighted by `weighting` over them, whatever
    the sampling); `pad_to` pads to that many clients (tests, chunking; never fewer than the
    real ones)."""
    drawn = client_ids is None
    ids = self.sample_clients(round_idx) if drawn else np.asarray(client_ids, np.int64)
    num_real = len(ids)
    size = pad_to or num_real
    if drawn and self.sampling == "poisson" and not pad_to:
      size = self.padded_size(round_idx)
      before = self.padded_size(round_idx - 1) if round_idx else self.max_cohort
      if size > before:
        logging.warning("engine.sampling='poisson': round %d drew %d clients, more than the "
                        "padded cohort of %d: the round is compiled once more for %d clients "
                        "(the padding stays %d from now on)", round_idx, num_real, before,
                        size, size)
    if size < num_real:
      raise ValueError(f"pad_to={pad_to} is smaller than the {num_real} clients of round "
                       f"{round_idx}: a sampled client is never dropped")
    carrier = drawn and self.fixed_denominator and num_real == 0
    size = max(size, 1) if carrier else size
    s, b = self.max_steps, self.batch_size
    batch_idx = np.zeros((size, s, b), np.int32)
    example_mask = np.zeros((size, s, b), bool)
    dtype = tree.float_dtype()   # float64 under jax_enable_x64: the weights stay exact
    num_examples = np.zeros((size,), dtype)
    client_ids = np.full((size,), self.num_clients, np.int32)  # padding id M: dropped on scatter
    for c, cid in enumerate(ids):
      batch_idx[c], example_mask[c] = self.client_plan(int(cid), round_idx)
      num_examples[c] = self.client_sizes[cid]
      client_ids[c] = cid
    real = np.arange(size) < num_real
    if drawn and self.fixed_denominator:
      # 1 / (q M) for each real client; an empty draw's first padding slot carries the noise.
      weights = np.where(real | carrier & (np.arange(size) == 0), 1.0 / self.clients_per_round,
                         0.0)
    elif self.weighting == "examples":
      weights = num_examples / max(num_examples[:num_real].sum(), 1.0)
    else:
      weights = np.where(real, 1.0 / max(num_real, 1), 0.0)
    return Cohort(client_ids=client_ids, weights=weights.astype(dtype),
                  num_examples=num_examples, batch_idx=batch_idx, example_mask=example_mask,
                  step_mask=example_mask.any(axis=2))
