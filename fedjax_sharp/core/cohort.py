"""Host-side cohort sampling and data plans with fixed shapes `[C, S, B]`.

Randomness comes from NumPy generators seeded by `(seed, stream, round[, client])`, so a round's
cohort and batch order depend only on the seed and the round (resuming or changing the execution
strategy never changes them).
"""
from __future__ import annotations

import collections.abc
import math
from typing import Sequence

import numpy as np

from fedjax_sharp.core.engine import Cohort

STREAM_SAMPLING = 1
STREAM_DATA_ORDER = 2
WEIGHTINGS = ("examples", "uniform")


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
  """Samples cohorts (uniformly, without replacement) and builds their padded data plans.

  Args:
    client_indices: for each of the M clients, the indices of its training examples (a list
      of arrays, or a `ClientSlices` for populations of millions).
    clients_per_round: C, the cohort size.
    batch_size: B.
    local_epochs: E, used when `local_steps == 0`.
    local_steps: fixed K for every client (0: use epochs).
    seed: experiment seed.
    weighting: 'examples' (n_m / sum n) or 'uniform'.
    max_steps: S; default the largest K_m over all clients, so shapes never change.
  """

  def __init__(self, client_indices: Sequence[np.ndarray], clients_per_round: int,
               batch_size: int, local_epochs: int = 1, local_steps: int = 0, seed: int = 0,
               weighting: str = "examples", max_steps: int | None = None):
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
    self.clients_per_round = clients_per_round
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
    return (self.clients_per_round, self.max_steps, self.batch_size)

  def sample_clients(self, round_idx: int) -> np.ndarray:
    rng = np.random.default_rng([self.seed, STREAM_SAMPLING, round_idx])
    return np.sort(rng.choice(self.num_clients, self.clients_per_round, replace=False))

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
    """The round's Cohort (NumPy arrays). `pad_to` adds padding clients (tests, chunking)."""
    ids = self.sample_clients(round_idx) if client_ids is None else np.asarray(client_ids)
    num_real = len(ids)
    size = pad_to or num_real
    s, b = self.max_steps, self.batch_size
    batch_idx = np.zeros((size, s, b), np.int32)
    example_mask = np.zeros((size, s, b), bool)
    num_examples = np.zeros((size,), np.float32)
    client_ids = np.full((size,), self.num_clients, np.int32)  # padding id M: dropped on scatter
    for c, cid in enumerate(ids):
      batch_idx[c], example_mask[c] = self.client_plan(int(cid), round_idx)
      num_examples[c] = self.client_sizes[cid]
      client_ids[c] = cid
    if self.weighting == "examples":
      weights = num_examples / num_examples[:num_real].sum()
    else:
      weights = np.where(np.arange(size) < num_real, 1.0 / num_real, 0.0).astype(np.float32)
    return Cohort(client_ids=client_ids, weights=weights.astype(np.float32),
                  num_examples=num_examples, batch_idx=batch_idx, example_mask=example_mask,
                  step_mask=example_mask.any(axis=2))
