"""Per-client accuracy: percentiles across clients, the worst client, the participation gap.

Each client's accuracy is the global model's test accuracy REWEIGHTED TO THE CLIENT'S LABEL
DISTRIBUTION: `acc_m = sum_c p_m(c) acc_c`, `p_m` the client's training label frequencies and
`acc_c` the per-class test accuracy (one pass over the test set serves every client). This is
the accuracy the model would have on a test set drawn like client m's data, without holding
out any of the client's (few) examples. Where a dataset has per-client test examples (a
natural partition with `test_clients`), `client_accuracy_from_examples` uses those instead.

    per_class = per_class_accuracy(apply_fn, params, x_test, y_test, num_classes)
    acc = reweighted_client_accuracy(per_class, client_label_counts(y_train, client_indices, C))
    summary = client_percentiles(acc, trained=ever_sampled_mask)
"""
from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sharp.core import backends


def per_class_accuracy(apply_fn: Callable, params, x: np.ndarray, y: np.ndarray,
                       num_classes: int, batch_size: int = 1000,
                       preprocess: Callable | None = None) -> np.ndarray:
  """Test accuracy of each class ([C]; NaN for a class with no test example)."""
  @backends.jit
  def predict(p, xb):
    xb = preprocess(xb, jax.random.key(0)) if preprocess is not None else xb
    return jnp.argmax(apply_fn(p, xb), axis=-1)
  correct = np.zeros(num_classes)
  total = np.bincount(np.asarray(y), minlength=num_classes).astype(np.float64)
  n = len(y)
  for start in range(0, n, batch_size):
    xb, yb = x[start:start + batch_size], np.asarray(y[start:start + batch_size])
    pad = batch_size - len(yb) if n > batch_size else 0
    if pad:   # one compiled shape
      xb = np.concatenate([xb, np.zeros((pad, *xb.shape[1:]), xb.dtype)])
    pred = np.asarray(predict(params, jnp.asarray(xb)))[:len(yb)]
    np.add.at(correct, yb, pred == yb)
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.where(total > 0, correct / np.maximum(total, 1), np.nan)


def client_label_counts(y_train: np.ndarray, client_indices: Sequence[np.ndarray],
                        num_classes: int) -> np.ndarray:
  """[M, C] training label counts per client."""
  y_train = np.asarray(y_train)
  return np.stack([np.bincount(y_train[np.asarray(ix)], minlength=num_classes)
                   for ix in client_indices]).astype(np.float64)


def reweighted_client_accuracy(per_class: np.ndarray, label_counts: np.ndarray) -> np.ndarray:
  """[M] accuracies `sum_c p_m(c) acc_c` (classes without test examples are left out and the
  remaining weights renormalised)."""
  per_class = np.asarray(per_class, np.float64)
  known = ~np.isnan(per_class)
  counts = np.asarray(label_counts, np.float64) * known[None, :]
  totals = counts.sum(axis=1)
  if np.any(totals == 0):
    raise ValueError("a client has no training example of any class with test examples")
  return (counts * np.nan_to_num(per_class)[None, :]).sum(axis=1) / totals


def client_accuracy_from_examples(correct: np.ndarray, test_clients) -> np.ndarray:
  """[M] accuracies from per-example correctness [N_test] and per-client test index lists."""
  correct = np.asarray(correct, np.float64)
  return np.array([correct[np.asarray(ix)].mean() if len(ix) else np.nan
                   for ix in test_clients])


def model_client_percentiles(apply_fn: Callable, params, dataset, client_indices,
                             trained: np.ndarray | None = None,
                             preprocess: Callable | None = None) -> dict:
  """`client_percentiles` of a model's reweighted per-client accuracies (module docstring) on a
  dataset with `x_test`, `y_test`, `y_train` and `num_classes`."""
  per_class = per_class_accuracy(apply_fn, params, dataset.x_test, dataset.y_test,
                                 dataset.num_classes, preprocess=preprocess)
  acc = reweighted_client_accuracy(
      per_class, client_label_counts(dataset.y_train, client_indices, dataset.num_classes))
  return client_percentiles(acc, trained=trained)


def client_percentiles(accuracy: np.ndarray, trained: np.ndarray | None = None,
                       percentiles=(10, 50, 90)) -> dict:
  """{'client_acc_p10', 'client_acc_p50', 'client_acc_p90', 'client_acc_worst',
  'worst_client', 'client_acc_mean'} and, with `trained` (bool [M]: sampled at least once),
  {'trained_acc', 'untrained_acc', 'participation_gap' = trained - untrained} (None where a
  group is empty). Percentiles by linear interpolation (NumPy's default)."""
  acc = np.asarray(accuracy, np.float64)
  valid = ~np.isnan(acc)
  if not valid.any():
    raise ValueError("no client has an accuracy")
  out = {f"client_acc_p{p}": float(np.percentile(acc[valid], p)) for p in percentiles}
  worst = int(np.nanargmin(acc))
  out.update({"client_acc_worst": float(acc[worst]), "worst_client": worst,
              "client_acc_mean": float(acc[valid].mean())})
  if trained is not None:
    trained = np.asarray(trained, bool)
    a = acc[trained & valid]
    b = acc[~trained & valid]
    out["trained_acc"] = float(a.mean()) if a.size else None
    out["untrained_acc"] = float(b.mean()) if b.size else None
    out["participation_gap"] = (out["trained_acc"] - out["untrained_acc"]
                                if a.size and b.size else None)
  return out
