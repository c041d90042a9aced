"""What an experiment is (`Experiment`: data, partition, model, algorithm, engine, sampler and
the evaluator, ready for `training.loop.run`) and the pieces its builders share: the dataset's
preprocessing, the test-set evaluator and the DP mechanism of `config.dp`. The builders:
`classification_experiment` and `minimax_experiment` (`training.loop.build_experiment` picks
the one for `task.name`).

    exp = loop.build_experiment(config)        # validated, 'auto' resolved (`config.prepare`)
    server_state, client_table = exp.engine.init(exp.init_params)
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp import data as data_lib
from fedjax_sharp.core import accounting, backends, feeding, losses, privacy
from fedjax_sharp.core.algorithm import FederatedAlgorithm, RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import RoundEngine, TrainData
from fedjax_sharp.training import privacy_rules

# PRNG streams: one root key from the seed, one stream per purpose.
STREAM_INIT, STREAM_TRAIN = 0, 1


def is_token_dataset(dataset) -> bool:
  """Integer sequences [N, L] (AG News token ids) rather than images [N, H, W, C]."""
  x = dataset.x_train
  return np.ndim(x) == 2 and np.issubdtype(np.asarray(x[:1]).dtype, np.integer)


def make_preprocess(dataset, augment: str, per_example: bool, pad: int = 4) -> Callable:
  """The dataset's own preprocessing, inside jit: images (uint8 [B, H, W, C]) are normalised
  and, if configured, randomly cropped (zero pad `pad`) and flipped; token ids pass through
  unchanged (int32: a float cast would corrupt embedding lookups)."""
  if is_token_dataset(dataset):
    if augment != "none":
      raise ValueError(f"data.augment={augment!r} applies to images; {dataset.name!r} is a "
                       f"token dataset: use data.augment='none'")
    return lambda x, key: x
  mean, std = dataset.mean, dataset.std

  def preprocess(x, key):
    x = data_lib.augment.normalize(x, mean, std)
    if augment == "crop_flip":
      x = data_lib.augment.random_crop_flip(key, x, pad=pad, per_example=per_example)
    return x
  return preprocess


@dataclasses.dataclass
class Experiment:
  config: Any
  dataset: Any
  client_indices: list
  model: Any
  apply_fn: Callable
  algorithm: FederatedAlgorithm
  engine: RoundEngine
  sampler: CohortSampler
  train_data: TrainData
  init_params: Any
  evaluate: Callable[[Any], dict]
  model_bytes: int
  eval_preprocess: Callable = None
  metric: str = "test_accuracy"          # what summaries, tables and progress lines report
  higher_is_better: bool = True
  artifacts: Callable | None = None      # (params, workdir, tag) -> None, e.g. GAN sample grids
  feeder: Any = None                     # core.feeding: for_round(t) -> (TrainData, Cohort)
  # core.accounting.AccountingSetting of the algorithm's DP mechanism (None without DP).
  accounting: Any = None

  def __post_init__(self):
    if self.feeder is None and self.train_data is not None:
      self.feeder = feeding.DeviceFeeder(self.train_data.x, self.train_data.y, self.sampler.build)

  def top_eigenvalues(self, params, k: int = 1, iters: int = 20, method: str = "power",
                      max_examples: int = 0, progress=None):
    """Top-k Hessian eigenvalues of the test cross-entropy at `params` (fedjax_sharp.analysis;
    `progress(done, total)` after every Hessian-vector product)."""
    from fedjax_sharp.analysis import hessian
    return hessian.model_top_eigenvalues(
        self.apply_fn, params, self.dataset.x_test, self.dataset.y_test, k=k, method=method,
        iters=iters, batch_size=self.config.eval.batch_size, preprocess=self.eval_preprocess,
        max_examples=max_examples, progress=progress)

  def learning_rate(self, round_idx: int) -> float:
    return self.config.local.lr * self.config.local.lr_decay ** round_idx

  def round_info(self, round_idx: int) -> RoundInfo:
    return RoundInfo.at(round_idx, self.learning_rate(round_idx), len(self.client_indices))


def make_evaluator(apply_fn, x_test, y_test, preprocess, batch_size: int):
  """Returns params -> {'test_loss', 'test_accuracy'}: fixed-size padded batches, one jit.

  Per-token targets (`y_test` [N, L], next-token prediction; encoding in `core.losses`): the
  loss is the mean over the tokens counted in the loss, the accuracy the share of right
  predictions among the tokens counted in the accuracy."""
  n = len(y_test)
  batch_size = min(batch_size, n)
  num_batches = math.ceil(n / batch_size)
  pad = num_batches * batch_size - n
  xs = np.concatenate([x_test, np.zeros((pad, *x_test.shape[1:]), x_test.dtype)])
  ys = np.concatenate([y_test, np.zeros((pad, *y_test.shape[1:]), y_test.dtype)])
  ms = np.arange(len(ys)) < n
  xs = jnp.asarray(xs.reshape(num_batches, batch_size, *x_test.shape[1:]))
  ys = jnp.asarray(ys.reshape(num_batches, batch_size, *y_test.shape[1:]))
  ms = jnp.asarray(ms.reshape(num_batches, batch_size))
  key = jax.random.key(0)  # unused: no augmentation at test time
  if np.ndim(y_test) > 1:
    return _token_evaluator(apply_fn, xs, ys, ms, preprocess, key)

  @backends.jit
  def batch_stats(params, x, y, m):
    logits = apply_fn(params, preprocess(x, key))
    ce = jax.nn.log_softmax(logits) [jnp.arange(y.shape[0]), y]
    mf = m.astype(jnp.float32)
    return -jnp.sum(ce * mf), jnp.sum((jnp.argmax(logits, -1) == y) * mf)

  def evaluate(params) -> dict:
    loss, correct = 0.0, 0.0
    for b in range(num_batches):  # host loop: convolutions inside XLA CPU loops are slow
      l, c = batch_stats(params, xs[b], ys[b], ms[b])
      loss, correct = loss + l, correct + c
    return {"test_loss": float(loss) / n, "test_accuracy": float(correct) / n}
  return evaluate


def _token_evaluator(apply_fn, xs, ys, ms, preprocess, key):
  """`make_evaluator` for per-token targets: sums over the batches, then the two token means."""
  @backends.jit
  def batch_stats(params, x, y, m):
    logits = apply_fn(params, preprocess(x, key))
    n_loss = losses.loss_count(y, m)
    return (losses.masked_cross_entropy(logits, y, m) * n_loss, losses.correct_count(logits, y, m),
            n_loss, losses.accuracy_count(y, m))

  def evaluate(params) -> dict:
    loss = correct = n_loss = n_acc = 0.0
    for b in range(len(ms)):  # host loop, as make_evaluator's
      l, c, nl, na = batch_stats(params, xs[b], ys[b], ms[b])
      loss, correct, n_loss, n_acc = loss + l, correct + c, n_loss + nl, n_acc + na
    return {"test_loss": float(loss) / max(float(n_loss), 1.0),
            "test_accuracy": float(correct) / max(float(n_acc), 1.0)}
  return evaluate


def apply_privacy(config, algorithm: FederatedAlgorithm, params, population: int):
  """(algorithm, accounting): `algorithm` wrapped by `config.dp`'s mechanism when
  `dp.enabled` (`core.privacy.with_dp`; with `dp.target_epsilon`, the noise multiplier solved
  over `config.rounds` rounds), and the accounting of whatever mechanism it then applies (an
  algorithm may apply its own, DP-FedSAM: the resolved config records it in `dp`); None
  without DP."""
  dp = config.dp
  account = functools.partial(
      accounting.accounting_setting, params=params, cohort=int(config.clients_per_round),
      population=int(population), delta=float(dp.delta),
      accountant=privacy_rules.dp_accountant(config), sampling=privacy_rules.sampling(config),
      noise_cohort_size=dp.noise_cohort_size)
  if dp.enabled and not privacy_rules.own_privacy(config):
    # Unset: 1, or (with a target) solved below; the placeholder 0 checks nothing it cannot know.
    sigma = (0.0 if dp.target_epsilon is not None else 1.0 if dp.noise_multiplier is None
             else float(dp.noise_multiplier))
    count_noise = (float(config.clients_per_round) / 20.0 if dp.clip_count_noise is None
                   else float(dp.clip_count_noise))
    mechanism = privacy.Mechanism(float(dp.clip_norm), sigma, clip=str(dp.clip),
                                  noise=str(dp.noise), adaptive=bool(dp.adaptive_clip),
                                  clip_quantile=float(dp.clip_quantile),
                                  clip_lr=float(dp.clip_lr), clip_count_noise=count_noise,
                                  noise_scale=(int(config.clients_per_round)
                                               / int(dp.noise_cohort_size or
                                                     config.clients_per_round)))
    if dp.target_epsilon is not None:
      sigma = account(privacy.with_dp(algorithm, mechanism)).solve_noise_multiplier(
          float(dp.target_epsilon), int(config.rounds))
      logging.info("dp.target_epsilon=%g at delta %g over %d rounds -> noise multiplier %.4f",
                   dp.target_epsilon, dp.delta, config.rounds, sigma)
      mechanism = dataclasses.replace(mechanism, noise_multiplier=sigma)
    algorithm = privacy.with_dp(algorithm, mechanism)
  if algorithm.privacy is None:
    return algorithm, None
  if float(dp.delta) >= 1.0 / int(population):
    logging.warning("dp.delta=%g is not below 1/num_clients = 1/%d: a mechanism that reveals "
                    "one client's data outright meets (epsilon, delta); use dp.delta well below "
                    "%g", dp.delta, population, 1.0 / int(population))
  return algorithm, account(algorithm)
