"""Fair classification over classes as a federated minimax task (agnostic / minimax-fair
learning, the standard setting of the federated minimax literature).

    f(x, y) = sum_c y_c L_c(x) - (lambda/2) ||y||^2,   y in the probability simplex,

with `L_c` the class-c POPULATION loss `sum_i (n_{c,i}/n_c) L_{c,i}(x)` (cross-entropy). Under a
Dirichlet(0.1) label split many clients hold no example of some class, so each client's
objective carries the population weights:

    f_i(x, y) = sum_c y_c (n n_{c,i}) / (n_i n_c) L_{c,i}(x) - (lambda/2) ||y||^2,

aggregated with weights n_i / n (the engine's 'examples' weighting): then sum_i (n_i/n) f_i = f
exactly (tested). On a minibatch of client i this is the per-example weight
`y[label] * n / n_label` on the cross-entropy, averaged over the batch: an unbiased estimate.
`lambda = 0.1` is our choice (the FESS-GDA paper's fair-classification settings are not
available offline). Metrics: worst-class and mean test accuracy, and the weights `y`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sharp.core import backends
from fedjax_sharp.core.engine import TrainData
from fedjax_sharp.minimax import projections
from fedjax_sharp.minimax.tasks import MinimaxTask

DEFAULT_LAMBDA = 0.1


def fair_objective(apply_fn, class_weights: jax.Array, lam: float):
  """f_i(params, batch) on a minibatch: mean_b[y[label_b] w[label_b] CE_b] - lam/2 ||y||^2, with
  `class_weights[c] = n / n_c` (masked mean over the real examples)."""
  def objective(params, batch):
    logits = apply_fn(params["x"], batch["x"])
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
    weight = params["y"][batch["y"]] * class_weights[batch["y"]]
    mask = batch["mask"].astype(ce.dtype)
    value = jnp.sum(weight * ce * mask) / jnp.maximum(jnp.sum(mask), 1.0)
    return value - 0.5 * lam * jnp.sum(params["y"] ** 2)
  return objective


def population_objective(apply_fn, params, x, y, num_classes: int, lam: float):
  """The global f(x, y) = sum_c y_c L_c(x) - lam/2 ||y||^2 on a whole dataset (for tests)."""
  logits = apply_fn(params["x"], x)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
  per_class = jnp.stack([jnp.sum(jnp.where(y == c, ce, 0.0)) / jnp.maximum(jnp.sum(y == c), 1)
                         for c in range(num_classes)])
  return params["y"] @ per_class - 0.5 * lam * jnp.sum(params["y"] ** 2)


def fair_classification(dataset, client_indices, apply_fn, init_model_params, *,
                        lam: float = DEFAULT_LAMBDA, preprocess=None,
                        eval_batch_size: int = 1000) -> MinimaxTask:
  """The task on an ArrayDataset partitioned into `client_indices` (model from the registry)."""
  num_classes = dataset.num_classes
  labels = np.asarray(dataset.y_train)[np.concatenate(client_indices)]
  counts = np.bincount(labels, minlength=num_classes).astype(np.float64)
  n = counts.sum()
  class_weights = jnp.asarray(np.where(counts > 0, n / np.maximum(counts, 1), 0.0), jnp.float32)
  objective = fair_objective(apply_fn, class_weights, lam)

  def gradients(params, batch, key):
    value, grads = jax.value_and_grad(objective)(params, batch)
    return grads, value

  x_test, y_test = dataset.x_test, dataset.y_test
  eval_pre = preprocess or (lambda xb, key: xb.astype(jnp.float32))

  @backends.jit
  def batch_correct(model_params, xb, yb):
    pred = jnp.argmax(apply_fn(model_params, eval_pre(xb, jax.random.key(0))), -1)
    return jnp.stack([jnp.sum((pred == yb) & (yb == c)) for c in range(num_classes)])

  test_counts = np.bincount(y_test, minlength=num_classes)

  def evaluate(params):
    correct = np.zeros(num_classes)
    for start in range(0, len(y_test), eval_batch_size):  # host loop: convolutions (CPU)
      correct += np.asarray(batch_correct(params["x"], jnp.asarray(x_test[start:start +
                                                                        eval_batch_size]),
                                          jnp.asarray(y_test[start:start + eval_batch_size])))
    per_class = correct / np.maximum(test_counts, 1)
    return {"worst_class_accuracy": float(per_class.min()),
            "test_accuracy": float(correct.sum() / len(y_test)),
            "per_class_accuracy": [float(v) for v in per_class],
            "y": [float(v) for v in np.asarray(params["y"])]}

  def init_params(key):
    return {"x": init_model_params, "y": jnp.full((num_classes,), 1.0 / num_classes)}

  sizes = {"x": int(sum(np.size(a) for a in jax.tree.leaves(init_model_params))),
           "y": num_classes}
  return MinimaxTask(
      name="fair_classification", init_params=init_params, gradients=gradients,
      project_y=projections.make("simplex"),
      train_data=TrainData(jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train)),
      client_indices=client_indices, evaluate=evaluate, primary_metric="worst_class_accuracy",
      higher_is_better=True, preprocess=preprocess or (lambda xb, key: xb.astype(jnp.float32)),
      param_sizes=sizes, extras={"class_counts": counts, "lambda": lam})
