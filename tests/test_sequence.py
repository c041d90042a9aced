"""Next-token prediction: the per-token target encoding and its loss / accuracy masks
on hand-made batches, the KL terms of FedGMT and FedNTD on tokens, the character and word
LSTMs, the evaluator, and rounds of the real engine on ragged token clients (vmap == host)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sharp.algorithms import common
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.fed_gmt import fed_gmt, trajectory_loss
from fedjax_sharp.algorithms.fed_ntd import ntd_loss
from fedjax_sharp.core import losses
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, TrainData
from fedjax_sharp.models import count_params, get_model, init_params
from fedjax_sharp.models.sequence import LSTM
from fedjax_sharp.training.experiment import make_evaluator

from algo_helpers import assert_trees_close, run_rounds

# A toy vocabulary in the readers' layout: pad 0, "characters" 1..8, then OOV, BOS, EOS.
PAD, OOV, BOS, EOS, V = 0, 9, 10, 11, 12
SHAKESPEARE = dict(loss_ignore_ids=(PAD,), accuracy_ignore_ids=(EOS,))
STACKOVERFLOW = dict(loss_ignore_ids=(PAD,), accuracy_ignore_ids=(OOV, BOS, EOS))

# The hand-made batch: 2 sequences of 4 targets with padding, end-of-sequence and OOV tokens,
# and the class each position's logits predict (one logit A = ln 23, the others 0: the
# predicted class has probability 23/34, every other class 1/34).
Y = np.array([[3, 5, EOS, PAD],
              [OOV, 4, 7, EOS]], np.int32)
PRED = np.array([[3, 6, EOS, 2],
                 [OOV, 4, 1, 5]])
RIGHT, WRONG = math.log(34 / 23), math.log(34)   # the cross-entropy of each kind of token


def hand_logits():
  logits = np.zeros((*PRED.shape, V), np.float32)
  np.put_along_axis(logits, PRED[..., None], math.log(23), axis=-1)
  return jnp.asarray(logits)


# ------------------------------------------------------------------------------------------
def test_encode_targets_by_hand():
  np.testing.assert_array_equal(losses.encode_targets(Y, **SHAKESPEARE),
                                [[3, 5, -EOS - 2, -1], [OOV, 4, 7, -EOS - 2]])
  np.testing.assert_array_equal(losses.encode_targets(Y, **STACKOVERFLOW),
                                [[3, 5, -EOS - 2, -1], [-OOV - 2, 4, 7, -EOS - 2]])
  # An id in both lists is ignored; the class ids decode back.
  both = losses.encode_targets(Y, (PAD, EOS), (EOS, OOV))
  np.testing.assert_array_equal(both, [[3, 5, -1, -1], [-OOV - 2, 4, 7, -1]])
  encoded = jnp.asarray(losses.encode_targets(Y, **STACKOVERFLOW))
  decoded = np.asarray(losses.target_classes(encoded))
  np.testing.assert_array_equal(decoded, np.where(Y == PAD, 0, Y))
  with pytest.raises(ValueError, match="ids >= 0"):
    losses.encode_targets(both)
  with pytest.raises(ValueError, match="integer"):
    losses.encode_targets(Y.astype(np.float32))


@pytest.mark.parametrize("mask,style,loss_tokens,right_loss,acc_tokens,correct", [
    # Shakespeare: the loss counts every non-pad target (row 0: 3, EOS right, 5 wrong; row 1:
    # OOV, 4 right, 7, EOS wrong); the accuracy leaves out pad and EOS: 3 of {3, 5, OOV, 4, 7}.
    ([1, 1], SHAKESPEARE, 7, 4, 5, 3),
    # Stack Overflow: same loss; the accuracy counts in-vocabulary targets only: {3, 5, 4, 7}.
    ([1, 1], STACKOVERFLOW, 7, 4, 4, 2),
    # The second sequence is a padding example: only row 0 counts.
    ([1, 0], SHAKESPEARE, 3, 2, 2, 1),
    ([0, 0], STACKOVERFLOW, 0, 0, 0, 0),
])
def test_masks_on_hand_made_batch(mask, style, loss_tokens, right_loss, acc_tokens, correct):
  y = jnp.asarray(losses.encode_targets(Y, **style))
  mask = jnp.asarray(mask, bool)
  logits = hand_logits()
  expected_loss = ((right_loss * RIGHT + (loss_tokens - right_loss) * WRONG)
                   / max(loss_tokens, 1))
  np.testing.assert_allclose(losses.masked_cross_entropy(logits, y, mask), expected_loss,
                             rtol=1e-6)
  assert float(losses.loss_count(y, mask)) == loss_tokens
  assert float(losses.accuracy_count(y, mask)) == acc_tokens
  assert float(losses.correct_count(logits, y, mask)) == correct
  # step_metrics: 'examples' weighs the mean loss (loss tokens); the accuracy has its own count.
  m = common.step_metrics(losses.masked_cross_entropy(logits, y, mask), logits,
                          {"x": None, "y": y, "mask": mask})
  assert set(m) == {"loss_sum", "correct", "examples", "accuracy_tokens", "steps"}
  np.testing.assert_allclose(m["loss_sum"], right_loss * RIGHT + (loss_tokens - right_loss)
                             * WRONG, rtol=1e-6)
  assert (float(m["examples"]), float(m["accuracy_tokens"]), float(m["correct"])) == (
      loss_tokens, acc_tokens, correct)


def test_classification_labels_take_the_old_path_bit_for_bit():
  """Per-example labels: the formulas of the classification losses before per-token labels
  existed, written out here, give identical bits (the golden algorithm tests rely on them)."""
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(7, 5)), jnp.float32)
  teacher = jnp.asarray(rng.normal(size=(7, 5)), jnp.float32)
  y = jnp.asarray(rng.integers(0, 5, 7), jnp.int32)
  mask = jnp.asarray([1, 1, 0, 1, 1, 1, 0], bool)
  mf = mask.astype(jnp.float32)
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
  old_ce = jnp.sum(ce * mf) / jnp.maximum(jnp.sum(mf), 1.0)
  np.testing.assert_array_equal(losses.masked_cross_entropy(logits, y, mask), old_ce)
  np.testing.assert_array_equal(losses.correct_count(logits, y, mask),
                                jnp.sum((jnp.argmax(logits, -1) == y) * mf))
  others = jnp.arange(4)[None, :]
  others = others + (others >= y[:, None]).astype(others.dtype)
  np.testing.assert_array_equal(losses.not_true_logits(logits, y),
                                jnp.take_along_axis(logits, others, axis=-1))
  m = common.step_metrics(old_ce, logits, {"x": None, "y": y, "mask": mask})
  assert set(m) == {"loss_sum", "correct", "examples", "steps"}
  assert float(m["examples"]) == 5.0
  # And the per-example KL against an independent NumPy formula.
  lp_t = np.asarray(jax.nn.log_softmax(teacher / 2.0), np.float64)
  lp_s = np.asarray(jax.nn.log_softmax(logits / 2.0), np.float64)
  kl = (np.exp(lp_t) * (lp_t - lp_s)).sum(-1)
  np.testing.assert_allclose(losses.tempered_kl(teacher, logits, 2.0, mask),
                             kl[np.asarray(mask)].mean(), rtol=1e-5)


def _token_problem(seed=0, batch=3, length=5):
  rng = np.random.default_rng(seed)
  raw = rng.integers(1, V, (batch, length)).astype(np.int32)
  raw[0, 3:] = PAD                       # a short sequence
  raw[1, 1] = EOS
  raw[2, 0] = OOV
  y = jnp.asarray(losses.encode_targets(raw, **STACKOVERFLOW))
  mask = jnp.asarray([1, 1, 0][:batch], bool)       # the last sequence is a padding example
  teacher = jnp.asarray(rng.normal(size=(batch, length, V)), jnp.float32)
  student = jnp.asarray(rng.normal(size=(batch, length, V)), jnp.float32)
  counted = np.asarray(losses.loss_mask(y, mask)).reshape(-1)
  flat = lambda a: a.reshape(-1, *a.shape[2:])[counted]
  classes = np.where(raw == PAD, 0, raw).reshape(-1)[counted]
  return y, mask, teacher, student, flat, jnp.asarray(classes)


def test_token_kls_equal_the_example_formula_on_the_counted_tokens():
  y, mask, teacher, student, flat, classes = _token_problem()
  ones = jnp.ones(classes.shape, bool)
  assert int(classes.shape[0]) == 3 + 5      # row 0: 3 non-pad targets; row 1: all 5
  for tau in (1.0, 3.0):
    np.testing.assert_allclose(
        losses.tempered_kl(teacher, student, tau, losses.loss_mask(y, mask)),
        losses.tempered_kl(flat(teacher), flat(student), tau, ones), rtol=1e-6)
    np.testing.assert_allclose(
        losses.not_true_kl(teacher, student, y, tau, mask),
        losses.not_true_kl(flat(teacher), flat(student), classes, tau, ones), rtol=1e-6)
  np.testing.assert_allclose(losses.masked_cross_entropy(student, y, mask),
                             losses.masked_cross_entropy(flat(student), classes, ones), rtol=1e-6)
  with pytest.raises(ValueError, match="loss_mask"):
    losses.tempered_kl(teacher, student, 1.0, mask)   # a [B] mask for [B, L, V] logits


def test_fedgmt_and_fedntd_losses_on_tokens():
  """The algorithms' own loss functions (FedGMT's trajectory loss, FedNTD's) on per-token
  labels equal the example formulas on the flattened counted tokens."""
  y, mask, teacher, student, flat, classes = _token_problem(seed=1)
  ones = jnp.ones(classes.shape, bool)
  ident = lambda params, x: params        # the "model" returns its parameters as logits
  batch, flat_batch = ({"x": None, "y": y, "mask": mask},
                       {"x": None, "y": classes, "mask": ones})
  for loss_fn in (trajectory_loss(ident, 0.7, 3.0), ntd_loss(ident, 0.7, 2.0)):
    total, (ce, kl, _) = loss_fn(student, teacher, batch)
    ref_total, (ref_ce, ref_kl, _) = loss_fn(flat(student), flat(teacher), flat_batch)
    np.testing.assert_allclose([total, ce, kl], [ref_total, ref_ce, ref_kl], rtol=1e-6)
    assert float(kl) > 0


# ------------------------------------------------------------------------------------------
def _np_lstm(x, kernel, bias):
  """Haiku's LSTM in NumPy (float64): gates i, g, f, o of [x_t, h_{t-1}], forget bias 1."""
  sig = lambda z: 1.0 / (1.0 + np.exp(-z))
  b, length, _ = x.shape
  hidden = kernel.shape[1] // 4
  h, c, out = np.zeros((b, hidden)), np.zeros((b, hidden)), []
  for t in range(length):
    i, g, f, o = np.split(np.concatenate([x[:, t], h], -1) @ kernel + bias, 4, axis=-1)
    c = sig(f + 1.0) * c + sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(c)
    out.append(h)
  return np.stack(out, 1)


def test_lstm_layer_matches_numpy_reference():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(2, 5, 3)).astype(np.float32)
  layer = LSTM(4)
  params = layer.init(jax.random.key(0), jnp.asarray(x))["params"]
  kernel = rng.normal(size=params["kernel"].shape).astype(np.float32) * 0.5
  bias = rng.normal(size=params["bias"].shape).astype(np.float32) * 0.5
  got = layer.apply({"params": {"kernel": kernel, "bias": bias}}, jnp.asarray(x))
  np.testing.assert_allclose(got, _np_lstm(x.astype(np.float64), kernel, bias), atol=1e-5)


def test_fedjax_model_sizes_and_registry():
  """fedjax's defaults: its own model tests assert these parameter counts."""
  for name, vocab, length, count in (("char_lstm", 86 + 4, 80, 820522),
                                     ("word_lstm", 10000 + 4, 20, 4050748)):
    model = get_model(name, vocab)
    shapes = jax.eval_shape(lambda k: model.init(k, jnp.zeros((1, length)))["params"],
                            jax.random.key(0))
    assert count_params(shapes) == count, name
  with pytest.raises(ValueError, match="unknown field"):
    get_model("char_lstm", V, hidden_size=8)


@pytest.mark.parametrize("name,fields", [("char_lstm", dict(embed=4, hidden=8)),
                                         ("word_lstm", dict(embed=4, hidden=8))])
def test_models_are_causal_token_functions(name, fields):
  model = get_model(name, V, **fields)
  params = init_params(model, jax.random.key(0), (6,))   # float zeros: cast to token ids
  apply = jax.jit(lambda p, x: model.apply({"params": p}, x))
  x = np.random.default_rng(0).integers(0, V, (3, 6)).astype(np.int32)
  logits = apply(params, jnp.asarray(x))
  assert logits.shape == (3, 6, V) and logits.dtype == jnp.float32
  x2 = x.copy()
  x2[:, 4] = (x2[:, 4] + 1) % V             # change the 5th token only
  logits2 = apply(params, jnp.asarray(x2))
  np.testing.assert_array_equal(logits2[:, :4], logits[:, :4])   # the past does not see it
  assert float(jnp.max(jnp.abs(logits2[:, 4:] - logits[:, 4:]))) > 1e-4
  # vmapped over a client axis of parameters, as the engine runs it.
  stacked = jax.tree.map(lambda p: jnp.stack([p, 2 * p]), params)
  both = jax.vmap(apply, in_axes=(0, None))(stacked, jnp.asarray(x))
  np.testing.assert_allclose(both[0], logits, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(both[1], apply(jax.tree.map(lambda p: 2 * p, params),
                                            jnp.asarray(x)), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------
def test_evaluator_per_token_against_numpy():
  rng = np.random.default_rng(2)
  model = get_model("char_lstm", V, embed=4, hidden=8, layers=1)
  params = init_params(model, jax.random.key(1), (5,))
  apply = lambda p, x: model.apply({"params": p}, x)
  x = rng.integers(1, V, (7, 5)).astype(np.int32)
  raw = np.concatenate([x[:, 1:], np.full((7, 1), EOS)], 1).astype(np.int32)
  raw[2, 2:] = PAD
  raw[4, 1] = OOV
  y = losses.encode_targets(raw, **STACKOVERFLOW)
  got = make_evaluator(apply, x, y, lambda x, key: x, batch_size=3)(params)  # 3 + 3 + 1 (pad)
  logits = np.asarray(apply(params, jnp.asarray(x)), np.float64)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  counted = raw != PAD
  in_vocab = counted & ~np.isin(raw, (OOV, BOS, EOS))
  ce = -np.take_along_axis(logp, raw[..., None], -1)[..., 0]
  np.testing.assert_allclose(got["test_loss"], ce[counted].mean(), rtol=1e-5)
  right = logits.argmax(-1) == raw
  assert got["test_accuracy"] == pytest.approx(right[in_vocab].mean(), abs=1e-7)


# ------------------------------------------------------------------------------------------
SIZES = (5, 9, 3, 7)     # B = 4, one epoch: 2, 3, 1, 2 local steps, partial last batches


def _token_clients(seed=0, length=6):
  """Ragged clients of token sequences; the targets are the inputs shifted by one, padding
  after each sequence's own length, EOS at its end, some OOV."""
  rng = np.random.default_rng(seed)
  n = sum(SIZES)
  lengths = rng.integers(2, length + 1, n)
  seq = rng.integers(1, OOV + 1, (n, length + 1)).astype(np.int32)   # chars and OOV
  seq[:, 0] = BOS
  for i, l in enumerate(lengths):
    seq[i, l] = EOS
    seq[i, l + 1:] = PAD
  x, raw = seq[:, :-1], seq[:, 1:]
  bounds = np.cumsum([0, *SIZES])
  parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(len(SIZES))]
  return x, raw, parts


def _char_lstm():
  model = get_model("char_lstm", V, embed=4, hidden=8, layers=1)
  params = init_params(model, jax.random.key(0), (6,))
  return (lambda p, x: model.apply({"params": p}, x)), params


HOST = ExecutionConfig("host", local_loop="unrolled")
VMAP = ExecutionConfig("vmap", local_loop="rolled")


@pytest.mark.parametrize("algorithm", ["fedavg", "fedgmt"])
def test_engine_rounds_on_ragged_token_clients(algorithm):
  x, raw, parts = _token_clients()
  y = losses.encode_targets(raw, **SHAKESPEARE)
  data = TrainData(jnp.asarray(x), jnp.asarray(y))
  apply, params = _char_lstm()
  opt = common.local_sgd(0.9, 0.0)
  alg = (fed_avg(apply, opt) if algorithm == "fedavg"
         else fed_gmt(apply, opt, gamma=1.0, tau=3.0, alpha=0.5, beta=10.0))
  sampler = CohortSampler(parts, 3, 4, local_epochs=1, seed=1)
  copy = lambda tree: jax.tree.map(np.array, tree)
  results = {}
  # vmap over a cohort padded with 2 all-padding clients against the host strategy (clients
  # one after another, no padding client): the same rounds.
  for label, execution, pad_to in (("vmap+padding clients", VMAP, 5), ("host", HOST, None)):
    server, _, metrics, _ = run_rounds(alg, jax.tree.map(jnp.copy, params), data, sampler, 2,
                                       execution=execution, pad_to=pad_to)
    results[label] = (copy(server.params), copy(metrics))
  ref_params, ref_metrics = results["host"]
  got_params, got_metrics = results["vmap+padding clients"]
  assert_trees_close(got_params, ref_params, atol=2e-5, rtol=2e-5)
  assert set(got_metrics) == set(ref_metrics)
  for k in ref_metrics:
    np.testing.assert_allclose(got_metrics[k], ref_metrics[k], rtol=2e-5, err_msg=k)
  assert max(float(np.max(np.abs(a - np.asarray(b)))) for a, b in
             zip(jax.tree.leaves(ref_params), jax.tree.leaves(params))) > 1e-3
  # The last round's token counts, from the data: every example of the cohort once.
  ids = sampler.sample_clients(1)
  idx = np.concatenate([parts[int(c)] for c in ids])
  assert float(ref_metrics["examples"]) == np.sum(raw[idx] != PAD)
  assert float(ref_metrics["accuracy_tokens"]) == np.sum(~np.isin(raw[idx], (PAD, EOS)))
  assert 0 <= float(ref_metrics["correct"]) <= float(ref_metrics["accuracy_tokens"])
  if algorithm == "fedgmt":
    assert float(ref_metrics["kl_sum"]) > 0


def test_one_run_of_a_word_lstm_experiment(tmp_path):
  """The host loop end to end on a tiny token dataset with natural clients: model from the
  registry (ids as inputs), FedGMT, the recorder's token means and the per-token evaluator."""
  import json
  import types
  from fedjax_sharp.training import config as config_lib, loop
  from fedjax_sharp.training.classification_experiment import build_classification_experiment
  x, raw, parts = _token_clients()
  y = losses.encode_targets(raw, **STACKOVERFLOW)
  ds = types.SimpleNamespace(name="toy_tokens", x_train=x, y_train=y, x_test=x[:10],
                             y_test=y[:10], num_classes=V, input_shape=(6,),
                             train_clients=tuple(parts), test_clients=None, vocabulary=None,
                             client_ids=tuple(f"c{i}" for i in range(len(parts))))
  c = config_lib.base_config()
  c.name, c.rounds, c.clients_per_round, c.algorithm.name = "toy", 1, 3, "fedgmt"
  c.data.update(source="embedded", name="digits", partition="natural", num_clients=0,
                augment="none")
  c.model.name, c.model.word_lstm = "word_lstm", dict(embed=4, hidden=8)
  c.local.epochs, c.local.batch_size = 1, 4
  c.eval.every, c.eval.last_n = 1, 1
  c.engine.client_strategy, c.engine.local_loop = "vmap", "rolled"
  c = config_lib.prepare(c)
  exp = build_classification_experiment(c, dataset=ds)
  assert exp.model.__class__.__name__ == "WordLSTM"
  assert loop.run(c, str(tmp_path / "run"), progress=False, experiment=exp)["status"] == (
      "completed")
  (record,) = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
  assert abs(record["train_loss"] - math.log(V)) < 0.1 and record["kl_mean"] >= 0
  # The accuracy is a count over the cohort's in-vocabulary target tokens.
  idx = np.concatenate([parts[int(m)] for m in exp.sampler.sample_clients(0)])
  n_acc = np.sum(~np.isin(raw[idx], (PAD, OOV, BOS, EOS)))
  right = record["train_accuracy"] * n_acc
  assert abs(right - round(right)) < 1e-3 and 0 <= record["test_accuracy"] <= 1
