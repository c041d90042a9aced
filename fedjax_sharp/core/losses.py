"""Masked losses. Padding examples (mask 0) contribute nothing; an all-padding batch gives 0.

Two kinds of labels, told apart by shape (static, so each traces one path):

- Per-example labels (classification): `labels` [B] int class ids, `logits` [B, C], `mask` [B].
  Every real example counts in the loss and in the accuracy.
- Per-token labels (next-token prediction: Shakespeare, Stack Overflow): `labels` [B, L] has
  more dimensions than the example mask [B]; `logits` [B, L, V]. Each target id says how the
  token counts, like PyTorch's `ignore_index` (written by `encode_targets` in the data readers):

      y >= 0    a token counted in the loss and in the accuracy, class id y;
      y == -1   IGNORE: counted nowhere (padding);
      y <= -2   a token counted in the loss but not in the accuracy, class id -y - 2
                (Shakespeare's end-of-sequence, Stack Overflow's OOV / BOS / EOS).

  A padding example (mask 0) contributes no token. The loss is the mean over the batch's loss
  tokens (y != -1), not fedjax's per-sequence sum (Stack Overflow) or sum / L (Shakespeare):
  the same minimiser, a gradient scaled by a batch-dependent constant. The accuracy counts a
  token right when the argmax over all V classes is its id; `accuracy_count` is its
  denominator. (fedjax's 'accuracy_in_vocab' instead keeps OOV targets in the denominator as
  always wrong and takes the argmax over the non-special classes only; its 'accuracy_no_eos'
  is what `encode_targets(y, (PAD,), (EOS,))` gives.)

So every algorithm keeps one code path: the losses and metrics below read `(logits, labels,
mask)` and do the right thing for both kinds.
"""
from __future__ import annotations

from typing import Iterable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sharp.core import tree

IGNORE = -1   # a per-token target counted nowhere (padding)


def encode_targets(y, loss_ignore_ids: Iterable[int] = (0,),
                   accuracy_ignore_ids: Iterable[int] = ()) -> np.ndarray:
  """Next-token targets `y` (int [..., L], ids >= 0) in the per-token encoding above.

  loss_ignore_ids: ids counted nowhere (IGNORE; e.g. the padding id 0).
  accuracy_ignore_ids: ids counted in the loss but not in the accuracy (stored as -id - 2;
    e.g. Shakespeare's EOS; Stack Overflow's OOV, BOS and EOS for the in-vocabulary accuracy).
  An id in both lists is ignored. Host-side NumPy, for the data readers.
  """
  y = np.asarray(y)
  if not np.issubdtype(y.dtype, np.integer):
    raise ValueError(f"encode_targets: targets must be integer token ids, got {y.dtype}")
  if y.size and int(y.min()) < 0:
    raise ValueError(f"encode_targets: targets must be ids >= 0 (got {int(y.min())}); "
                     f"were they encoded already?")
  loss_ignore = np.asarray(list(loss_ignore_ids), np.int64)
  accuracy_ignore = np.asarray(list(accuracy_ignore_ids), np.int64)
  if (loss_ignore < 0).any() or (accuracy_ignore < 0).any():
    raise ValueError(f"encode_targets: ignore ids must be >= 0, got {loss_ignore.tolist()} and "
                     f"{accuracy_ignore.tolist()}")
  y = y.astype(np.int32)
  out = np.where(np.isin(y, accuracy_ignore), -y - 2, y)
  return np.where(np.isin(y, loss_ignore), IGNORE, out).astype(np.int32)


def is_per_token(labels, mask) -> bool:
  """Labels with more dimensions than the example mask are per-token targets."""
  return jnp.ndim(labels) > jnp.ndim(mask)


def target_classes(labels, mask=None):
  """Class ids of the targets: `labels` for per-example labels; per-token targets decoded
  (y <= -2 -> -y - 2; IGNORE -> 0, a class id that its zero weight makes irrelevant)."""
  if mask is not None and not is_per_token(labels, mask):
    return labels
  return jnp.where(labels >= 0, labels, jnp.maximum(-labels - 2, 0))


def _token_weights(labels, mask, counted):
  mask = mask.reshape(mask.shape + (1,) * (labels.ndim - mask.ndim))
  return jnp.logical_and(mask.astype(bool), counted)


def loss_mask(labels, mask):
  """What counts in the loss, shaped like `labels`: `mask` itself for per-example labels; the
  real examples' tokens with y != IGNORE for per-token labels."""
  if not is_per_token(labels, mask):
    return mask
  return _token_weights(labels, mask, labels != IGNORE)


def accuracy_mask(labels, mask):
  """What counts in the accuracy, shaped like `labels`: `mask` for per-example labels; the
  real examples' tokens with y >= 0 for per-token labels."""
  if not is_per_token(labels, mask):
    return mask
  return _token_weights(labels, mask, labels >= 0)


def loss_count(labels, mask):
  """The loss's denominator (the run's float dtype): real examples, or the tokens counted in
  the loss."""
  return jnp.sum(loss_mask(labels, mask).astype(tree.float_dtype()))


def accuracy_count(labels, mask):
  """The accuracy's denominator (the run's float dtype): real examples, or the tokens counted
  in it."""
  return jnp.sum(accuracy_mask(labels, mask).astype(tree.float_dtype()))


def _masked_mean(values, mask):
  mask = mask.astype(values.dtype)
  return jnp.sum(values * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def masked_cross_entropy(logits, labels, mask):
  """Mean softmax cross-entropy over the real examples (or the loss tokens) of the batch."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, target_classes(labels, mask))
  return _masked_mean(ce, loss_mask(labels, mask))


def tempered_kl(teacher_logits, student_logits, tau: float, mask):
  """KL(softmax(teacher/tau) || softmax(student/tau)), "batchmean" over the real examples.

  `(1/B) sum_b sum_c p_t log(p_t / p_s)`; the teacher is treated as a constant
  (stop_gradient), as the FedGMT EMA model is frozen during local training. `mask` has the
  logits' shape without the class axis: the example mask [B], or for per-token logits
  [B, L, V] the token mask `loss_mask(labels, mask)` [B, L] (a mean over the loss tokens).
  """
  if jnp.ndim(mask) != jnp.ndim(student_logits) - 1:
    raise ValueError(f"tempered_kl: mask of shape {jnp.shape(mask)} for logits of shape "
                     f"{jnp.shape(student_logits)}; per-token logits take the token mask "
                     f"losses.loss_mask(labels, mask)")
  teacher_logits = jax.lax.stop_gradient(teacher_logits)
  log_p_t = jax.nn.log_softmax(teacher_logits / tau, axis=-1)
  log_p_s = jax.nn.log_softmax(student_logits / tau, axis=-1)
  kl = jnp.sum(jnp.exp(log_p_t) * (log_p_t - log_p_s), axis=-1)
  return _masked_mean(kl, mask)


def correct_count(logits, labels, mask):
  """Right predictions among what `accuracy_mask` counts (the run's float dtype)."""
  return jnp.sum((jnp.argmax(logits, axis=-1) == labels)
                 * accuracy_mask(labels, mask).astype(tree.float_dtype()))


def not_true_logits(logits, labels):
  """The logits of the C - 1 classes other than each example's (or token's) label, in class
  order. `labels`: class ids (per-token targets are decoded first)."""
  labels = target_classes(labels)
  num_classes = logits.shape[-1]
  others = jnp.arange(num_classes - 1)
  others = others + (others >= labels[..., None]).astype(others.dtype)  # skip the true class
  return jnp.take_along_axis(logits, others, axis=-1)


def not_true_kl(teacher_logits, student_logits, labels, tau: float, mask):
  """FedNTD's not-true distillation: KL(q~_teacher || q~_student), "batchmean" over real examples
  (or the loss tokens of per-token labels).

  `q~` is the tempered softmax over the not-true classes only (the true class's logit is
  removed before the softmax, so it changes nothing). The teacher is a constant.
  """
  classes = target_classes(labels, mask)
  return tempered_kl(not_true_logits(teacher_logits, classes),
                     not_true_logits(student_logits, classes), tau, loss_mask(labels, mask))
