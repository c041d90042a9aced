"""The drawn client partitions of a training set: IID, Dirichlet (two flavours), pathological
shards, and the long-tail subsampling applied before them.

All functions are NumPy only, deterministic given `seed` (an int or a `np.random.Generator`,
which is then advanced), and return one sorted int64 index array into the training set per
client. Every client is non-empty and no index is used twice. `partition.partition` calls
them as the config says.
"""
from __future__ import annotations

import logging

import numpy as np

_log = logging.getLogger(__name__)


def rng_of(seed) -> np.random.Generator:
  if isinstance(seed, np.random.Generator):
    return seed
  if seed is None:
    raise ValueError("partitions need an explicit seed (int or np.random.Generator)")
  return np.random.default_rng(seed)



def sorted_parts(parts: list) -> list[np.ndarray]:
  return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def _check_num_clients(num_clients: int, num_examples: int):
  if int(num_clients) != num_clients or num_clients < 1:
    raise ValueError(f"data.num_clients must be a positive integer, got {num_clients}")
  if num_clients > num_examples:
    raise ValueError(f"data.num_clients={num_clients} is larger than the number of training "
                     f"examples ({num_examples}); every client needs at least one example")


def _class_index(labels: np.ndarray):
  """(classes present, per-example position in `classes`)."""
  labels = np.asarray(labels).reshape(-1)
  classes, inverse = np.unique(labels, return_inverse=True)
  return classes, inverse.reshape(-1)


# --------------------------------------------------------------------------------------
# IID.
# --------------------------------------------------------------------------------------
def iid(num_examples: int, num_clients: int, seed) -> list[np.ndarray]:
  """Random split of `range(num_examples)` into `num_clients` parts (sizes differ by <= 1)."""
  _check_num_clients(num_clients, num_examples)
  perm = rng_of(seed).permutation(num_examples)
  return sorted_parts(np.array_split(perm, num_clients))


# --------------------------------------------------------------------------------------
# Dirichlet over labels.
# --------------------------------------------------------------------------------------
def _one_class_per_client(labels: np.ndarray, num_clients: int, rng: np.random.Generator,
                          examples_per_client: int | None = None) -> list[np.ndarray]:
  """alpha = 0: client m holds only class perm[m % C]; a class is split evenly among its clients.

  With `examples_per_client`, each client takes min(examples_per_client, n_c // k_c)
  examples of its class (k_c = clients holding class c), so sizes are equal whenever every
  class has enough examples.
  """
  classes, inv = _class_index(labels)
  num_classes = len(classes)
  if num_clients < num_classes:
    raise ValueError(f"data.alpha=0 (one class per client) needs data.num_clients >= the number "
                     f"of classes ({num_classes}), got data.num_clients={num_clients}")
  class_perm = rng.permutation(num_classes)
  client_class = class_perm[np.arange(num_clients) % num_classes]
  parts: list[np.ndarray] = [None] * num_clients  # type: ignore[list-item]
  for c in range(num_classes):
    holders = np.flatnonzero(client_class == c)
    idx = rng.permutation(np.flatnonzero(inv == c))
    if len(idx) < len(holders):
      raise ValueError(f"class {classes[c]} has {len(idx)} examples but {len(holders)} clients "
                       f"must hold it (data.alpha=0, data.num_clients={num_clients})")
    if examples_per_client is not None:
      take = min(int(examples_per_client), len(idx) // len(holders))
      if take < examples_per_client:
        _log.warning("dirichlet_balanced alpha=0: class %s has %d examples for %d clients; "
                     "its clients get %d examples instead of %d", classes[c], len(idx),
                     len(holders), take, examples_per_client)
      chunks = [idx[i * take:(i + 1) * take] for i in range(len(holders))]
    else:
      chunks = np.array_split(idx, len(holders))
    for m, chunk in zip(holders, chunks):
      parts[m] = chunk
  return sorted_parts(parts)


def dirichlet_label(labels: np.ndarray, num_clients: int, alpha: float, seed,
                    min_size: int = 1, max_retries: int = 1000) -> list[np.ndarray]:
  """Label-skewed partition of Wang et al. 2020 (as used by FedDyn/FedGMT); sizes vary.

  For each class, proportions over clients are drawn from Dir(alpha * 1) and the class's
  (shuffled) examples are cut accordingly. The whole draw is repeated until every client
  holds at least `min_size` examples (at most `max_retries` draws).
  alpha = 0 means one class per client (see `_one_class_per_client`).
  """
  labels = np.asarray(labels).reshape(-1)
  n = labels.shape[0]
  _check_num_clients(num_clients, n)
  if not alpha >= 0:
    raise ValueError(f"data.alpha must be >= 0, got {alpha}")
  if min_size < 1:
    raise ValueError(f"min_size must be >= 1, got {min_size}")
  rng = rng_of(seed)
  if alpha == 0:
    return _one_class_per_client(labels, num_clients, rng)
  if min_size * num_clients > n:
    raise ValueError(f"data.num_clients={num_clients} clients x min_size={min_size} exceeds the "
                     f"{n} training examples")
  classes, inv = _class_index(labels)
  by_class = [np.flatnonzero(inv == c) for c in range(len(classes))]
  smallest = -1
  for _ in range(max_retries):
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for idx in by_class:
      idx = rng.permutation(idx)
      props = rng.dirichlet(np.full(num_clients, float(alpha)))
      if not np.all(np.isfinite(props)):
        continue
      cuts = (np.cumsum(props) * len(idx)).astype(np.int64)[:-1]
      for m, chunk in enumerate(np.split(idx, cuts)):
        parts[m].append(chunk)
    sizes = np.array([sum(len(c) for c in p) for p in parts])
    smallest = int(sizes.min())
    if smallest >= min_size and sizes.sum() == n:
      return sorted_parts([np.concatenate(p) for p in parts])
  raise RuntimeError(
      f"dirichlet_label: no draw in {max_retries} tries gave every one of the "
      f"{num_clients} clients at least {min_size} examples (last draw's smallest client: "
      f"{smallest}). Use a larger data.alpha, fewer data.num_clients, a smaller min_size, "
      f"or data.dirichlet_mode='balanced'.")


def _dirichlet_draw(rng: np.random.Generator, concentration: np.ndarray) -> np.ndarray:
  q = rng.dirichlet(concentration)
  if not np.all(np.isfinite(q)) or q.sum() <= 0:
    # All gamma draws underflowed (tiny concentration): the limit is a point mass,
    # on class c with probability concentration_c / sum.
    q = np.zeros_like(concentration)
    q[rng.choice(len(concentration), p=concentration / concentration.sum())] = 1.0
  return q / q.sum()


def dirichlet_balanced(labels: np.ndarray, num_clients: int, alpha: float, seed,
                       examples_per_client: int | None = None) -> list[np.ndarray]:
  """Equal-size label-skewed partition (Hsu et al. 2019; FedGloSS).

  Each client m (in order) draws a class prior q_m ~ Dir(alpha * p), p the class
  frequencies, then draws `examples_per_client` (default N // num_clients) examples one by
  one: a class from q_m (renormalised over the classes with examples left), then an unused
  example of that class. Implemented exactly, in blocks: a multinomial draw of the missing
  count, clipped to what each class has left, repeated with the excess on the classes
  that still have examples (the same law as rejection of draws on exhausted classes).
  alpha = 0 means one class per client.
  """
  labels = np.asarray(labels).reshape(-1)
  n = labels.shape[0]
  _check_num_clients(num_clients, n)
  if not alpha >= 0:
    raise ValueError(f"data.alpha must be >= 0, got {alpha}")
  if examples_per_client is None or examples_per_client == 0:
    examples_per_client = n // num_clients
  examples_per_client = int(examples_per_client)
  if examples_per_client < 1:
    raise ValueError(f"data.examples_per_client must be >= 1, got {examples_per_client}")
  if examples_per_client * num_clients > n:
    raise ValueError(f"data.examples_per_client={examples_per_client} x data.num_clients="
                     f"{num_clients} exceeds the {n} training examples")
  rng = rng_of(seed)
  if alpha == 0:
    return _one_class_per_client(labels, num_clients, rng, examples_per_client)

  classes, inv = _class_index(labels)
  num_classes = len(classes)
  pools = [rng.permutation(np.flatnonzero(inv == c)) for c in range(num_classes)]
  used = np.zeros(num_classes, dtype=np.int64)
  avail = np.array([len(p) for p in pools], dtype=np.int64)
  prior = avail / n
  parts = []
  for _ in range(num_clients):
    q = _dirichlet_draw(rng, float(alpha) * prior)
    counts = np.zeros(num_classes, dtype=np.int64)
    need = examples_per_client
    while need > 0:
      left = avail - counts
      weights = np.where(left > 0, q, 0.0)
      if weights.sum() <= 0:
        # q puts no mass on any class with examples left: the rejection sampler would then
        # never stop, so (as in Hsu et al.'s code) fall back to the class frequencies left.
        weights = left.astype(np.float64)
      draw = rng.multinomial(need, weights / weights.sum())
      take = np.minimum(draw, left)
      counts += take
      need -= int(take.sum())
    chunks = []
    for c in np.flatnonzero(counts):
      chunks.append(pools[c][used[c]:used[c] + counts[c]])
    used += counts
    avail -= counts
    parts.append(np.concatenate(chunks))
  return sorted_parts(parts)


# --------------------------------------------------------------------------------------
# Long tail and pathological shards.
# --------------------------------------------------------------------------------------
def long_tail_counts(n_max: int, num_classes: int, imbalance_factor: float) -> list[int]:
  """`int(n_max * (1 / imbalance_factor) ** (c / (C - 1)))` for c = 0..C-1."""
  if not imbalance_factor >= 1:
    raise ValueError(f"data.imbalance_factor must be >= 1, got {imbalance_factor}")
  if num_classes == 1:
    return [int(n_max)]
  ratio = 1.0 / imbalance_factor
  return [int(n_max * ratio ** (c / (num_classes - 1.0))) for c in range(num_classes)]


def long_tail(labels: np.ndarray, imbalance_factor: float, seed,
              num_classes: int | None = None) -> np.ndarray:
  """Sorted indices of a long-tailed subset: class c keeps `long_tail_counts(...)[c]`.

  n_max is the size of the largest class; each class keeps a seeded random subset (all
  of it if it has fewer examples than its quota). `imbalance_factor` = n_most / n_least
  (2 in FedGMT, i.e. the authors' generator's ratio 0.5).
  """
  labels = np.asarray(labels).reshape(-1)
  if not imbalance_factor >= 1:
    raise ValueError(f"data.imbalance_factor must be >= 1, got {imbalance_factor}")
  if num_classes is None:
    num_classes = int(labels.max()) + 1
  if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
    raise ValueError(f"labels must lie in [0, {num_classes}), got {labels.min()}..{labels.max()}")
  rng = rng_of(seed)
  sizes = np.bincount(labels, minlength=num_classes)
  quotas = long_tail_counts(int(sizes.max()), num_classes, imbalance_factor)
  kept = []
  for c in range(num_classes):
    idx = np.flatnonzero(labels == c)
    kept.append(rng.choice(idx, size=min(quotas[c], len(idx)), replace=False))
  return np.sort(np.concatenate(kept)).astype(np.int64)


def pathological(labels: np.ndarray, num_clients: int, shards_per_client: int,
                 seed) -> list[np.ndarray]:
  """McMahan et al.'s Path(r): sort by label, cut into num_clients * r equal shards (sizes
  differ by at most one), give each client r random shards.

  A client holds at most r classes when the class sizes are multiples of the shard size
  (e.g. CIFAR-10 with 100 clients, r = 2); otherwise a shard can straddle two classes.
  """
  labels = np.asarray(labels).reshape(-1)
  n = labels.shape[0]
  _check_num_clients(num_clients, n)
  if int(shards_per_client) != shards_per_client or shards_per_client < 1:
    raise ValueError(f"data.shards_per_client must be a positive integer, got {shards_per_client}")
  num_shards = num_clients * int(shards_per_client)
  if num_shards > n:
    raise ValueError(f"data.num_clients={num_clients} x data.shards_per_client="
                     f"{shards_per_client} = {num_shards} shards exceeds the {n} examples")
  rng = rng_of(seed)
  # Shuffle first so the order inside a class is random, then a stable sort by label.
  perm = rng.permutation(n)
  order = perm[np.argsort(labels[perm], kind="stable")]
  shards = np.array_split(order, num_shards)
  shard_perm = rng.permutation(num_shards).reshape(num_clients, int(shards_per_client))
  return sorted_parts([np.concatenate([shards[s] for s in row]) for row in shard_perm])
