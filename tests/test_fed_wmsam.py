"""FedWMSAM: rounds against an independent NumPy reference of the spec's formulas (every
perturbation variant, the clip, the alpha update, SCAFFOLD controls kept for absent clients),
the FedCM reduction through the registry, the code's per-tensor perturbation, the builder's
own local-optimizer defaults and config validation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms.registry import ALGORITHMS
from fedjax_sharp.algorithms import registry
from fedjax_sharp.algorithms.fed_wmsam import code_exact_perturbation, fed_wmsam
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import config as config_lib

import np_reference as ref
from algo_helpers import (apply_fn, assert_trees_close, assert_trees_equal, cohort_lr,
                          eager_batch, eager_round, init_params, make_problem, run_rounds, tmap)

WD = 1e-3       # the algorithm's own weight decay (the authors' code)
SIZES = (6, 9, 5, 8, 7)
ROUNDS = 3


def _setup(seed):
  data, parts = make_problem(SIZES, seed=seed)
  return data, CohortSampler(parts, 3, 4, local_epochs=1, seed=seed), init_params(seed)


def _flat_first(d, count):
  """The first `count` entries of `d` flattened in the order b, w (sorted keys), row-major."""
  return np.concatenate([d["b"].ravel(), d["w"].ravel()])[:count]


def _perturbation(variant, delta, rho):
  if variant == "code_exact":          # scalar per tensor: b <- d_0, w <- d_1
    d = _flat_first(delta, 2)
    shift = -rho * d / (np.abs(d).sum() + 1e-7)
    return {"b": np.full_like(delta["b"], shift[0]), "w": np.full_like(delta["w"], shift[1])}
  sign = 1.0 if variant == "paper" else -1.0
  return ref.scale(sign * rho / (ref.norm(delta) + 1e-7), delta)


def _cos_plus_one(a, b):
  denom = ref.norm(a) * ref.norm(b)
  if denom == 0:
    return 0.0
  return sum(float((a[k] * b[k]).sum()) for k in a) / denom + 1.0


def _reference(params, data, sampler, *, rho, alpha, smoothing, decay, max_norm, variant):
  """The spec's Part 2 section 2.3-2.4 in float64: returns (x, Delta, c, alpha, c_table)."""
  x = ref.to_np(params)
  momentum, c = ref.zeros(x), ref.zeros(x)
  c_table = {m: ref.zeros(x) for m in range(len(SIZES))}
  alphas = [alpha]
  for t in range(ROUNDS):
    cohort, lr = sampler.build(t), cohort_lr(t)
    ids = np.asarray(cohort.client_ids)
    updates, per_step, values, dcs = [], [], [], []
    for i, m in enumerate(ids):
      m_k = ref.add(momentum, ref.scale(alpha / (1 - alpha), ref.sub(c, c_table[m])))
      xb, target = x, x
      batches = ref.client_batches(data, cohort, i)
      for xs, ys, mask in batches:
        e = _perturbation(variant, ref.sub(target, xb), rho)
        g = ref.ce_grad(ref.add(xb, e), xs, ys, mask)
        direction = ref.add(ref.scale(alpha, g), ref.scale(1 - alpha, m_k))
        if max_norm and max_norm / (ref.norm(direction) + 1e-6) < 1.0:   # torch's clip
          direction = ref.scale(max_norm / (ref.norm(direction) + 1e-6), direction)
        xb = ref.sub(xb, ref.scale(lr, ref.add(direction, ref.scale(WD, xb))))
        target = ref.add(target, m_k)
      upload = ref.sub(xb, x)                                  # Delta_k = x_K - x^r
      values.append(_cos_plus_one(upload, momentum))
      c_new = ref.sub(ref.sub(c_table[m], c), ref.scale(1.0 / (len(batches) * lr), upload))
      dcs.append(ref.sub(c_new, c_table[m]))
      c_table[m] = c_new
      updates.append(upload)
      per_step.append(ref.scale(-1.0 / (len(batches) * lr), upload))
    alpha = (1 - smoothing) * alpha + smoothing * min(max(np.mean(values), 0.1), 0.9)
    alphas.append(alpha)
    c = ref.add(c, ref.scale(1.0 / len(SIZES), ref.mean(dcs, np.ones(len(dcs)))))
    momentum = ref.scale(decay, ref.mean(per_step, cohort.weights))
    x = ref.add(x, ref.mean(updates, cohort.weights))
  return x, momentum, c, alphas, c_table


CASES = {  # variant, rho, alpha_smoothing, max_grad_norm (0.3: the clip acts on most steps)
    "paper": ("paper", 0.3, 0.5, 0.3),
    # The defaults of rho, alpha_smoothing and max_grad_norm (alpha_0 is 0.3 in every case).
    "paper_defaults": ("paper", 0.01, 0.01, 10.0),
    "code_exact": ("code_exact", 0.3, 0.5, 0.3),
    "code_intended": ("code_intended", 0.3, 0.5, 0.3),
}


@pytest.fixture(scope="module")
def runs():
  """Each case once through the engine (3 rounds, 3 of 5 clients, ragged sizes)."""
  out = {}
  data, sampler, params = _setup(1)
  for case, (variant, rho, smoothing, max_norm) in CASES.items():
    alg = fed_wmsam(apply_fn, local_sgd(0.0, WD), rho=rho, alpha=0.3,
                    alpha_smoothing=smoothing, max_grad_norm=max_norm, variant=variant)
    server, table, _, _ = run_rounds(alg, params, data, sampler, ROUNDS)
    expected = _reference(params, data, sampler, rho=rho, alpha=0.3, smoothing=smoothing,
                          decay=0.998, max_norm=max_norm, variant=variant)
    out[case] = (server, table, expected)
  return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_rounds_match_numpy_reference(runs, case):
  server, table, (x, momentum, c, alphas, c_table) = runs[case]
  assert_trees_close(server.params, x, atol=3e-6)
  assert_trees_close(server.momentum, momentum, atol=3e-5)
  assert_trees_close(server.control, c, atol=3e-5)
  np.testing.assert_allclose(float(server.alpha), alphas[-1], rtol=1e-6)
  for m in range(len(SIZES)):
    assert_trees_close(tmap(lambda a: a[m], table), c_table[m], atol=3e-5)
  assert ref.norm(momentum) > 1e-2 and ref.norm(c) > 1e-3     # nothing trivially zero
  # Round 0: Delta = 0, so every value is 0 and alpha_1 = (1 - lambda) alpha_0 + 0.1 lambda.
  smoothing = CASES[case][2]
  np.testing.assert_allclose(alphas[1], (1 - smoothing) * 0.3 + 0.1 * smoothing)


def test_variants_differ(runs):
  """The perturbation's sign and form reach the result (a sign error would not pass unseen)."""
  p = {k: np.asarray(runs[k][0].params["w"]) for k in ("paper", "code_exact", "code_intended")}
  assert np.abs(p["paper"] - p["code_intended"]).max() > 1e-4
  assert np.abs(p["paper"] - p["code_exact"]).max() > 1e-4


def _config(name, **block):
  c = config_lib.base_config()
  c.algorithm.name = name
  for k, v in block.items():
    setattr(c.algorithm[name], k, v)
  return c


def test_rho0_frozen_alpha_no_controls_equals_registered_fedcm():
  """rho = 0, alpha frozen, m_k = Delta and no 0.998 on Delta: FedCM (beta = alpha) through the
  registry builders, the clip inactive on this model."""
  data, sampler, params = _setup(2)
  wm = _config("fedwmsam", rho=0.0, alpha=0.3, alpha_smoothing=0.0, control_variates=False,
               momentum_decay=1.0, weight_decay=WD)
  cm = _config("fedcm", beta=0.3)
  cm.local.weight_decay = WD
  a, _, ma, _ = run_rounds(registry.build_algorithm(wm, apply_fn), params, data, sampler, ROUNDS)
  b, _, mb, _ = run_rounds(registry.build_algorithm(cm, apply_fn), params, data, sampler, ROUNDS)
  assert_trees_equal(a.params, b.params)          # bitwise: the same operations in order
  assert_trees_equal(a.momentum, b.momentum)
  np.testing.assert_array_equal(ma["loss_sum"], mb["loss_sum"])
  assert float(a.alpha) == np.float32(0.3)
  assert ref.norm(ref.to_np(b.momentum)) > 1e-2


def test_code_exact_perturbation_is_one_scalar_per_tensor():
  rng = np.random.default_rng(0)
  delta = {"b": jnp.asarray(rng.normal(size=3), jnp.float32),
           "w": jnp.asarray(rng.normal(size=(5, 3)), jnp.float32)}
  e = code_exact_perturbation(delta, 0.2)
  d = _flat_first(ref.to_np(delta), 2)
  for i, k in enumerate(("b", "w")):
    leaf = np.asarray(e[k])
    assert leaf.shape == delta[k].shape and np.all(leaf == leaf.flat[0])
    assert np.sign(leaf.flat[0]) == -np.sign(d[i])
  np.testing.assert_allclose(abs(float(e["b"][0])) + abs(float(e["w"][0, 0])), 0.2, rtol=1e-5)
  zero = code_exact_perturbation(jax.tree.map(jnp.zeros_like, delta), 0.2)
  assert all(float(jnp.abs(v).max()) == 0 for v in zero.values())


def test_defaults_are_the_papers_settings():
  """Sec. 5.1 and Algorithm 1 of the paper: rho 0.01 (the code's 0.1 is an option), alpha_0 0.1,
  lambda 0.01, the 'paper' perturbation sign."""
  block = config_lib.base_config().algorithm.fedwmsam
  assert (block.rho, block.alpha, block.alpha_smoothing, block.variant) == (
      0.01, 0.1, 0.01, "paper")
  assert ALGORITHMS["fedwmsam"].build(_config("fedwmsam"), apply_fn).hparams == {"rho": 0.01}


def test_builder_own_optimizer_defaults_and_communication():
  c = _config("fedwmsam", rho=0.05)
  c.local.momentum, c.local.weight_decay = 0.9, 1e-5      # neither leaks into FedWMSAM
  alg = ALGORITHMS["fedwmsam"].build(c, apply_fn)
  assert (alg.communication.down, alg.communication.up) == (2, 1)
  assert alg.hparams == {"rho": 0.05}
  params, batch = init_params(5), eager_batch()
  direct = fed_wmsam(apply_fn, local_sgd(0.0, 1e-3), rho=0.05)
  assert_trees_equal(eager_round(alg, params, batch), eager_round(direct, params, batch))


@pytest.mark.parametrize("field,value", [("alpha", 1.0), ("alpha", 0.0), ("rho", -0.1),
                                         ("alpha_smoothing", 1.5), ("momentum_decay", 0.0),
                                         ("max_grad_norm", -1.0), ("variant", "code"),
                                         ("weight_decay", -1e-3)])
def test_bad_values_are_one_line_config_errors(field, value):
  c = _config("fedwmsam", **{field: value})
  with pytest.raises(ConfigError, match=rf"algorithm\.fedwmsam\.{field}") as err:
    config_lib.validate(c)
  assert "\n" not in str(err.value)
  if field != "weight_decay":       # a client-function field: checked by the builder
    with pytest.raises(ConfigError, match=rf"algorithm\.fedwmsam\.{field}"):
      fed_wmsam(apply_fn, local_sgd(0.0, WD), **{field: value})


def test_sam_client_optimizer_is_refused():
  c = _config("fedwmsam")
  c.local.optimizer = "sam"
  with pytest.raises(ValueError, match="fedwmsam"):
    ALGORITHMS["fedwmsam"].build(c, apply_fn)
