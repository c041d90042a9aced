"""Tests for fedjax_sharp.data.partition."""
import types

import numpy as np
import pytest

from fedjax_sharp import data
from fedjax_sharp.data import partition as P
from fedjax_sharp.training.config import base_config


def cfg(**kw):
  return types.SimpleNamespace(**{**base_config().data.to_dict(), **kw})


def balanced_labels(num_classes=10, per_class=100, seed=0):
  labels = np.repeat(np.arange(num_classes), per_class)
  return np.random.default_rng(seed).permutation(labels).astype(np.int32)


def check_parts(parts, n, num_clients, exhaustive):
  """Every client non-empty, int64, no index twice, all in range (and all used if exhaustive)."""
  assert isinstance(parts, list) and len(parts) == num_clients
  for p in parts:
    assert isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1 and len(p) > 0
  flat = np.concatenate(parts)
  assert len(np.unique(flat)) == len(flat), "an index is used twice"
  assert flat.min() >= 0 and flat.max() < n
  if exhaustive:
    assert len(flat) == n


def same(a, b):
  return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def mean_entropy(labels, parts, num_classes):
  hist = data.label_histograms(labels, parts, num_classes).astype(np.float64)
  p = hist / hist.sum(1, keepdims=True)
  with np.errstate(divide="ignore", invalid="ignore"):
    return float(-np.where(p > 0, p * np.log(p), 0).sum(1).mean())


# ---------------------------------------------------------------------------------------
# IID.
# ---------------------------------------------------------------------------------------
def test_iid_sizes_determinism_and_seeds():
  parts = data.iid(103, 10, seed=0)
  check_parts(parts, 103, 10, exhaustive=True)
  assert sorted(len(p) for p in parts) == [10] * 7 + [11] * 3
  assert same(parts, data.iid(103, 10, seed=0))
  assert not same(parts, data.iid(103, 10, seed=1))
  assert same(data.iid(103, 10, np.random.default_rng(5)), data.iid(103, 10, 5))
  with pytest.raises(ValueError, match="data.num_clients=11"):
    data.iid(10, 11, 0)


# ---------------------------------------------------------------------------------------
# Dirichlet, label mode (Wang et al.).
# ---------------------------------------------------------------------------------------
def test_dirichlet_label_partition_properties():
  labels = balanced_labels()
  parts = data.dirichlet_label(labels, 20, 0.3, seed=0)
  check_parts(parts, len(labels), 20, exhaustive=True)
  assert same(parts, data.dirichlet_label(labels, 20, 0.3, seed=0))
  assert not same(parts, data.dirichlet_label(labels, 20, 0.3, seed=1))
  sizes = [len(p) for p in parts]
  assert max(sizes) > 2 * min(sizes)  # sizes vary in this mode


def test_dirichlet_label_min_size_and_retry_error():
  labels = balanced_labels()
  parts = data.dirichlet_label(labels, 20, 0.2, seed=3, min_size=25)
  assert min(len(p) for p in parts) >= 25
  with pytest.raises(RuntimeError, match="data.alpha"):
    data.dirichlet_label(labels, 100, 0.01, seed=0, min_size=9, max_retries=5)


@pytest.mark.parametrize("mode", ["label", "balanced"])
def test_alpha_zero_is_one_class_per_client(mode):
  labels = balanced_labels(num_classes=10, per_class=60)
  parts = data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=25, alpha=0.0,
                                     dirichlet_mode=mode), seed=0)
  check_parts(parts, len(labels), 25, exhaustive=(mode == "label"))
  hist = data.label_histograms(labels, parts, 10)
  assert np.all((hist > 0).sum(1) == 1), "a client holds more than one class"
  holders = np.bincount(hist.argmax(1), minlength=10)
  assert sorted(holders) == [2] * 5 + [3] * 5  # classes spread as evenly as possible
  for c in range(10):  # each class split evenly among its holders
    sizes = hist[hist.argmax(1) == c, c]
    assert sizes.max() - sizes.min() <= 1
  if mode == "balanced":
    # N // M = 24 per client: classes held by 3 clients have 60 // 3 = 20 each.
    assert set(hist.sum(1)) <= {20, 24}


def test_alpha_zero_balanced_equal_sizes_when_divisible():
  labels = balanced_labels(num_classes=10, per_class=30)
  parts = data.dirichlet_balanced(labels, 20, 0.0, seed=1)
  check_parts(parts, len(labels), 20, exhaustive=True)
  assert {len(p) for p in parts} == {15}


def test_alpha_zero_needs_enough_clients():
  labels = balanced_labels()
  for mode in ("label", "balanced"):
    with pytest.raises(ValueError, match="data.num_clients"):
      data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=5, alpha=0,
                                 dirichlet_mode=mode), seed=0)


# ---------------------------------------------------------------------------------------
# Dirichlet, balanced mode (Hsu et al.).
# ---------------------------------------------------------------------------------------
def test_dirichlet_balanced_equal_sizes_and_determinism():
  labels = balanced_labels()
  parts = data.dirichlet_balanced(labels, 30, 0.5, seed=0)
  check_parts(parts, len(labels), 30, exhaustive=False)
  assert {len(p) for p in parts} == {1000 // 30}
  assert same(parts, data.dirichlet_balanced(labels, 30, 0.5, seed=0))
  assert not same(parts, data.dirichlet_balanced(labels, 30, 0.5, seed=1))
  parts = data.dirichlet_balanced(labels, 10, 0.5, seed=0, examples_per_client=17)
  assert {len(p) for p in parts} == {17}
  with pytest.raises(ValueError, match="examples_per_client"):
    data.dirichlet_balanced(labels, 10, 0.5, seed=0, examples_per_client=101)


def test_dirichlet_balanced_uses_every_example_when_sizes_add_up():
  # Unbalanced classes and tiny alpha: the per-client priors run out of classes, so the
  # renormalisation over the classes left must kick in to fill every client.
  labels = np.repeat(np.arange(5), [400, 50, 30, 15, 5]).astype(np.int32)
  parts = data.dirichlet_balanced(labels, 10, 0.05, seed=2)
  check_parts(parts, len(labels), 10, exhaustive=True)
  assert {len(p) for p in parts} == {50}


@pytest.mark.parametrize("mode", ["label", "balanced"])
def test_smaller_alpha_gives_more_skew(mode):
  labels = balanced_labels(num_classes=10, per_class=200)
  ent = {}
  for alpha in (0.05, 0.5, 100.0):
    parts = data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=20, alpha=alpha,
                                       dirichlet_mode=mode), seed=0)
    ent[alpha] = mean_entropy(labels, parts, 10)
  iid_ent = mean_entropy(labels, data.iid(len(labels), 20, 0), 10)
  assert ent[0.05] < ent[0.5] < ent[100.0]
  assert ent[0.05] < 0.5 * np.log(10)
  assert ent[100.0] > 0.95 * iid_ent


# ---------------------------------------------------------------------------------------
# The Dirichlet draws against their distribution's moments.
# ---------------------------------------------------------------------------------------
# A sample mean of N independent values lies within Z standard errors of its expectation
# (standard error: the values' sample standard deviation / sqrt(N)) but for a chance of about
# 7e-6 per comparison at Z = 4.5 (normal approximation), under 2e-4 for the ~20 comparisons of
# a test. The seeds are fixed, so a test either passes or fails for good.
Z = 4.5


def assert_mean_is(values, expected, slack=0.0, what=""):
  """The mean of the rows of `values` ([N] or [N, k]) is `expected` within Z standard errors
  (plus `slack`, a deterministic bound on a known bias)."""
  values = np.asarray(values, np.float64)
  mean = values.mean(0)
  stderr = values.std(0, ddof=1) / np.sqrt(len(values))
  ok = np.abs(mean - expected) <= Z * stderr + slack
  assert np.all(ok), (f"{what}: mean {mean} against the expected {expected} "
                      f"(standard error {stderr}, slack {slack})")


# Unequal classes, so that a prior that ignores the class frequencies shows in the means.
CLASS_SIZES = np.array([7500, 5000, 4000, 3000, 2500, 2000, 1500, 1000])


def skewed_labels(long_tail):
  """(labels, the class sizes the Dirichlet draw sees, the config fields that give them):
  CLASS_SIZES as they are, or 6000 per class cut by the long tail with imbalance factor 4."""
  if not long_tail:
    sizes = CLASS_SIZES
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return np.random.default_rng(7).permutation(labels).astype(np.int32), sizes, {}
  labels = balanced_labels(num_classes=8, per_class=6000, seed=7)
  sizes = np.array(data.long_tail_counts(6000, 8, 4.0))
  return labels, sizes, dict(long_tail=True, imbalance_factor=4.0)


@pytest.mark.parametrize("long_tail", [False, True])
def test_dirichlet_balanced_matches_its_dirichlet_multinomial_moments(long_tail):
  """Balanced mode: client m's prior is q_m ~ Dir(alpha * p) (p the class frequencies of what
  is partitioned: after the long tail when it is on) and its E examples are drawn from q_m, so
  while no class runs out its class counts are Dirichlet-multinomial: the class-k share f_k has
  mean p_k and variance p_k (1 - p_k) (E + alpha) / (E (1 + alpha)) (Var q_k = p_k (1 - p_k) /
  (alpha + 1), plus the multinomial's E[q_k (1 - q_k)] / E).

  Deliberate bugs it catches: q_m ~ Dir(alpha * K * p) (the sum of the variances about 45
  standard errors too small with K = 8 at alpha = 1), alpha doubled or halved (about 20
  standard errors), a uniform prior Dir(alpha / K) (the means of the largest and smallest
  classes 12-22 standard errors off), and the long-tail path losing the kept class
  frequencies."""
  labels, sizes, long_tail_fields = skewed_labels(long_tail)
  num_clients, per_client, alpha = 1500, 10, 1.0
  parts = data.partition_dataset(labels, cfg(partition="dirichlet", dirichlet_mode="balanced",
                                             num_clients=num_clients, alpha=alpha,
                                             examples_per_client=per_client,
                                             **long_tail_fields), seed=0)
  check_parts(parts, len(labels), num_clients, exhaustive=False)
  hist = data.label_histograms(labels, parts, len(sizes))
  assert np.all(hist.sum(1) == per_client)
  # No class ran out, so no draw was clipped to what a class had left: the moments are exact.
  assert np.all(hist.sum(0) < sizes), (hist.sum(0), sizes)
  p = sizes / sizes.sum()
  share = hist / per_client
  variance = p * (1 - p) * (per_client + alpha) / (per_client * (1 + alpha))
  assert_mean_is(share, p, what="class shares")
  assert_mean_is((share - p) ** 2, variance, what="per-class variances")
  assert_mean_is(((share - p) ** 2).sum(1), variance.sum(), what="sum of the variances")


@pytest.mark.parametrize("long_tail", [False, True])
def test_dirichlet_label_matches_its_dirichlet_moments(long_tail):
  """Label mode: each class's examples are cut among the M clients by proportions drawn from
  Dir(alpha * 1_M), so client m's share s_m of a class has mean 1/M and variance
  (M - 1) / (M^2 (M alpha + 1)) (its Beta(alpha, (M - 1) alpha) marginal). The cut rounds
  down cumulative positions, so each share is within 1/n_c of the drawn proportion (n_c the
  class's size): a bias of at most 1/n_c on a mean share and 4/n_c on the sum over clients
  of the squared deviations. 40 partitions x 8 classes give 320 independent draws.

  Deliberate bugs it catches: alpha doubled or halved (the variance 15-20 standard errors
  off), proportions not symmetric over the clients (the per-client means)."""
  labels, sizes, long_tail_fields = skewed_labels(long_tail)
  num_clients, alpha = 10, 0.5
  config = cfg(partition="dirichlet", dirichlet_mode="label", num_clients=num_clients,
               alpha=alpha, **long_tail_fields)
  shares = []
  for seed in range(40):
    parts = data.partition_dataset(labels, config, seed=seed)
    hist = data.label_histograms(labels, parts, len(sizes))
    np.testing.assert_array_equal(hist.sum(0), sizes)
    shares.append((hist / sizes).T)              # [classes, clients]
  shares = np.concatenate(shares)
  bias = 1 / sizes.min()
  m = num_clients
  variance = (m - 1) / (m ** 2 * (m * alpha + 1))
  assert_mean_is(shares, np.full(m, 1 / m), slack=bias, what="per-client shares")
  assert_mean_is(((shares - 1 / m) ** 2).sum(1), m * variance, slack=4 * bias,
                 what="sum over clients of the share variances")


# ---------------------------------------------------------------------------------------
# Long tail.
# ---------------------------------------------------------------------------------------
def test_long_tail_counts_hand_checked():
  # int(100 * 0.5 ** (c / 9)): 0.5**(5/9) = 0.6804, 0.5**(7/9) = 0.5833, 0.5**(8/9) = 0.5400.
  assert data.long_tail_counts(100, 10, 2.0) == [100, 92, 85, 79, 73, 68, 62, 58, 54, 50]
  assert data.long_tail_counts(5000, 10, 2.0) == [5000, 4629, 4286, 3968, 3674, 3401, 3149,
                                                   2916, 2700, 2500]
  assert data.long_tail_counts(500, 3, 10.0) == [500, 158, 50]
  assert data.long_tail_counts(7, 4, 1.0) == [7] * 4
  assert data.long_tail_counts(9, 1, 2.0) == [9]


def test_long_tail_subset():
  labels = balanced_labels(num_classes=10, per_class=100)
  keep = data.long_tail(labels, 2.0, seed=0)
  assert keep.dtype == np.int64 and len(np.unique(keep)) == len(keep)
  np.testing.assert_array_equal(np.bincount(labels[keep]), [100, 92, 85, 79, 73, 68, 62, 58, 54, 50])
  keep2 = data.long_tail(labels, 2.0, seed=1)
  np.testing.assert_array_equal(np.bincount(labels[keep2]), np.bincount(labels[keep]))
  assert not np.array_equal(keep, keep2)
  np.testing.assert_array_equal(data.long_tail(labels, 2.0, seed=0), keep)
  assert len(data.long_tail(labels, 1.0, seed=0)) == 1000
  with pytest.raises(ValueError, match="data.imbalance_factor"):
    data.long_tail(labels, 0.5, seed=0)


def test_partition_with_long_tail_indexes_original_training_set():
  labels = balanced_labels(num_classes=10, per_class=100)
  parts = data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=10, alpha=0.5,
                                     long_tail=True, imbalance_factor=2.0), seed=0)
  check_parts(parts, len(labels), 10, exhaustive=False)
  flat = np.concatenate(parts)
  np.testing.assert_array_equal(np.bincount(labels[flat]), [100, 92, 85, 79, 73, 68, 62, 58, 54, 50])
  assert flat.max() > 721  # indices point into the 1000-example set, not the 721 kept
  iid_parts = data.partition_dataset(labels, cfg(partition="iid", num_clients=7, long_tail=True), seed=0)
  assert sum(len(p) for p in iid_parts) == 721  # default imbalance_factor is 2


# ---------------------------------------------------------------------------------------
# Pathological shards.
# ---------------------------------------------------------------------------------------
def test_pathological_shards():
  labels = balanced_labels(num_classes=10, per_class=100)
  parts = data.pathological(labels, 10, 2, seed=0)
  check_parts(parts, len(labels), 10, exhaustive=True)
  hist = data.label_histograms(labels, parts, 10)
  assert {len(p) for p in parts} == {100}  # exactly 2 shards of 50
  assert np.all((hist > 0).sum(1) <= 2)
  assert np.all(hist % 50 == 0)  # whole single-class shards
  assert (hist > 0).sum(1).mean() > 1.5  # mostly two different classes
  assert same(parts, data.pathological(labels, 10, 2, seed=0))
  assert not same(parts, data.pathological(labels, 10, 2, seed=1))
  parts = data.partition_dataset(labels, cfg(partition="pathological", num_clients=20,
                                     shards_per_client=5), seed=0)
  hist = data.label_histograms(labels, parts, 10)
  assert np.all((hist > 0).sum(1) <= 5) and {len(p) for p in parts} == {50}


# ---------------------------------------------------------------------------------------
# Config dispatch and validation.
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    (dict(partition="dirichlet", num_clients=5, alpha=-0.5), r"data.alpha must be >= 0, got -0.5"),
    (dict(partition="iid", num_clients=0), r"data.num_clients"),
    (dict(partition="iid", num_clients=2.5), r"data.num_clients"),
    (dict(partition="iid", num_clients=1001), r"data.num_clients=1001"),
    (dict(partition="iid", num_clients=900, long_tail=True), r"data.num_clients=900 .*kept"),
    (dict(partition="pathological", num_clients=5, shards_per_client=0), r"data.shards_per_client"),
    (dict(partition="pathological", num_clients=500, shards_per_client=3), r"data.shards_per_client"),
    (dict(partition="foo", num_clients=5), r"data.partition='foo' is not one of \['dirichlet', 'iid', 'pathological'\]"),
    (dict(partition="dirichlet", num_clients=5, alpha=1.0, dirichlet_mode="x"),
     r"data.dirichlet_mode='x' is not one of \['balanced', 'label'\]"),
    (dict(partition="iid", num_clients=5, long_tail=True, imbalance_factor=0.5),
     r"data.imbalance_factor must be >= 1"),
])
def test_partition_config_errors_name_the_field(kw, match):
  with pytest.raises(ValueError, match=match):
    data.partition_dataset(balanced_labels(), cfg(**kw), seed=0)


def test_partition_dispatch_matches_direct_calls_and_accepts_config_dict():
  labels = balanced_labels()
  assert same(data.partition_dataset(labels, cfg(partition="iid", num_clients=7), 4),
              data.iid(len(labels), 7, 4))
  assert same(data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=7, alpha=0.3), 4),
              data.dirichlet_label(labels, 7, 0.3, 4))
  assert same(data.partition_dataset(labels, cfg(partition="dirichlet", num_clients=7, alpha=0.3,
                                         dirichlet_mode="balanced"), 4),
              data.dirichlet_balanced(labels, 7, 0.3, 4))
  # The dispatcher is exported as partition_dataset.
  c = cfg(partition="iid", num_clients=7)
  assert same(data.partition_dataset(labels, c, 4), P.partition(labels, c, 4))
  cd = base_config().data   # an ml_collections.ConfigDict
  cd.partition, cd.num_clients, cd.alpha = "dirichlet", 7, 0.3
  assert same(data.partition_dataset(labels, cd, 4), data.dirichlet_label(labels, 7, 0.3, 4))


# ---------------------------------------------------------------------------------------
# Histograms.
# ---------------------------------------------------------------------------------------
def test_label_histograms_and_format():
  labels = np.array([0, 1, 1, 2, 2, 2])
  parts = [np.array([0, 1]), np.array([2, 3, 4, 5])]
  hist = data.label_histograms(labels, parts, 4)
  np.testing.assert_array_equal(hist, [[1, 1, 0, 0], [0, 1, 3, 0]])
  text = data.format_histograms(hist)
  assert "2 clients" in text and "client" in text and "size" in text
  rows = text.splitlines()
  assert rows[-1].split()[:3] == ["1", "4", "2"] and rows[-1].split()[-4:] == ["0", "1", "3", "0"]
  big = np.random.default_rng(0).integers(0, 5, (30, 100))
  text = data.format_histograms(big, max_rows=5)
  assert "(25 more clients)" in text and len(text.splitlines()) == 3 + 5 + 1
  assert ":" in text.splitlines()[3]  # class:count format for many classes
