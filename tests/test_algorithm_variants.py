"""Invariants of the algorithms' pure functions, each checked with and without `jax.jit`
(`chex.variants`): the same function is run compiled as one XLA program and op by op, so an
invariant that holds only under one of them (a Python branch on a traced value, a constant
folded differently, an eager-only cast) fails here.

- a zero learning rate: one local step leaves the client's parameters unchanged, for every
  registered classification algorithm (built by its registry builder from the base config,
  with the client optimiser its registration gives it);
- shapes and dtypes: a local step keeps the local state's shapes and dtypes, for every
  registered classification algorithm;
- reductions the specification states: FedProx at mu = 0 and FedSAM at rho = 0 are FedAvg,
  MoFedSAM at beta = 1 is FedSAM, FedGMT without the trajectory loss (gamma = 0) and without
  ADMM is FedAvg (the clients' models and the server's model after one round);
- the server update does not depend on the order of the cohort's uploads under uniform weights
  (FedAvg, SCAFFOLD, FedDyn).

The model is the dict-params softmax regression of `algo_helpers` (a few parameters); the
client and server states are perturbed from their initial values so that the duals, controls
and momenta a step reads are not zero. The hyperparameters travel in `RoundInfo.hparams` as the
engine passes them, so one compiled program serves a knob's values.
"""
from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from fedjax_sharp.algorithms.registry import ALGORITHMS, build_algorithm
from fedjax_sharp.core.algorithm import ClientInfo, RoundInfo
from fedjax_sharp.core.hparams import as_arrays
from fedjax_sharp.training import config as config_lib

from algo_helpers import apply_fn, eager_batch, init_params, np_normal, override, tmap

NUM_CLIENTS = 4      # M, all clients
LR = 0.1
STEPS = 2            # local steps of a reduction's round
CLIENTS = 2          # clients of a reduction's round
ALL = tuple((name, name) for name in sorted(ALGORITHMS))


def _config(name, overrides):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.local.momentum = 0.5
  c.local.weight_decay = 1e-3
  return override(c, **dict(overrides))


@functools.cache
def _algorithm(name, overrides=()):
  """The registry's algorithm `name` from the base config with `overrides` ((path, value)
  pairs, `algo_helpers.override`'s spelling); cached, so that each variant's compiled
  functions are reused across tests."""
  return build_algorithm(_config(name, overrides), apply_fn)


def _round_info(alg, lr, hparams=None):
  return RoundInfo.at(1, lr, NUM_CLIENTS,
                      hparams=as_arrays({**alg.hparams, **(hparams or {})}))


def _client_info(num_clients=1, steps=1):
  """ClientInfo of `num_clients` clients (a leading client axis), or of one (no axis)."""
  shape = (num_clients,) if num_clients > 1 else ()
  return ClientInfo(client_id=jnp.arange(1, 1 + num_clients, dtype=jnp.int32).reshape(shape),
                    num_examples=jnp.full(shape, 6.0, jnp.float32),
                    num_steps=jnp.full(shape, steps, jnp.int32),
                    weight=jnp.full(shape, 1.0 / num_clients, jnp.float32))


def _perturbed(state, seed):
  """`state` with N(0, 0.1^2) added to every floating leaf (integer, boolean and key leaves as
  they are): duals, controls, momenta and EMA models that are not zero."""
  leaves, treedef = jax.tree.flatten(state)
  out = []
  for i, leaf in enumerate(leaves):
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.floating):
      leaf = leaf + (0.1 * np_normal(leaf.shape, seed + i)).astype(leaf.dtype)
    out.append(leaf)
  return jax.tree.unflatten(treedef, out)


@functools.cache
def _local_step(name):
  """(server_state, client_state, batch, key, client_info, round_info) -> the local state after
  client_init, and after one local step from it."""
  alg = _algorithm(name)

  def step(server_state, client_state, batch, key, client_info, round_info):
    bcast = alg.broadcast(server_state, round_info)
    local = alg.client_init(bcast, client_state, client_info, round_info)
    after, _ = alg.local_step(local, batch, key, round_info)
    return local, after
  return step


def _step_inputs(name, lr):
  alg = _algorithm(name)
  params = init_params(7)
  return (_perturbed(alg.server_init(params), 100), _perturbed(alg.client_state_init(params), 200),
          eager_batch(seed=7), jax.random.key(7), _client_info(), _round_info(alg, lr))


@functools.cache
def _round(name, overrides=()):
  """(params, batches [C, S, ...], keys [C, S], client_infos [C], round_info) -> (the clients'
  models after STEPS local steps [C, ...], the server's model after the update) of one round
  from the initial states, clients vmapped and weighted uniformly."""
  alg = _algorithm(name, overrides)

  def one_round(params, batches, keys, client_infos, round_info):
    server = alg.server_init(params)
    bcast = alg.broadcast(server, round_info)

    def client(batches_c, keys_c, info):
      client_state = alg.client_state_init(params)
      local = alg.client_init(bcast, client_state, info, round_info)
      for s in range(STEPS):
        local, _ = alg.local_step(local, tmap(lambda b: b[s], batches_c), keys_c[s], round_info)
      upload, _ = alg.client_finalize(local, bcast, client_state, info, round_info)
      return local.params, upload

    models, uploads = jax.vmap(client)(batches, keys, client_infos)
    weights = jnp.full((CLIENTS,), 1.0 / CLIENTS, jnp.float32)
    server = alg.server_update(server, uploads, weights, jnp.ones((CLIENTS,), jnp.float32),
                               round_info)
    return models, alg.eval_params(server)
  return one_round


def _round_inputs():
  batches = [[eager_batch(seed=10 * c + s) for s in range(STEPS)] for c in range(CLIENTS)]
  batches = tmap(lambda *b: jnp.stack(b), *[tmap(lambda *b: jnp.stack(b), *bs) for bs in batches])
  keys = jax.random.split(jax.random.key(11), (CLIENTS, STEPS))
  return init_params(11), batches, keys, _client_info(CLIENTS, STEPS)


# (test name, algorithm, its overrides, the algorithm it reduces to, that one's overrides,
#  a value of the reducing knob that is round data and must move the result: {name: value}).
REDUCTIONS = (
    ("fedprox_mu0_is_fedavg", "fedprox", (("algorithm.fedprox.mu", 0.0),), "fedavg", (),
     {"mu": 0.5}),
    ("fedsam_rho0_is_fedavg", "fedsam", (("algorithm.fedsam.rho", 0.0),), "fedavg", (),
     {"rho": 0.5}),
    # MoFedSAM's client momentum is its own (0); FedSAM's is config.local's: set to match.
    ("mofedsam_beta1_is_fedsam", "mofedsam",
     (("algorithm.mofedsam.beta", 1.0), ("algorithm.mofedsam.rho", 0.2)), "fedsam",
     (("algorithm.fedsam.rho", 0.2), ("local.momentum", 0.0)), None),
    ("fedgmt_no_trajectory_loss_no_admm_is_fedavg", "fedgmt",
     (("algorithm.fedgmt.gamma", 0.0), ("algorithm.fedgmt.admm", False)), "fedavg", (),
     {"gamma": 1.0}),
)


class AlgorithmVariantsTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*ALL)
  def test_zero_learning_rate_step_keeps_the_parameters(self, name):
    """At learning rate 0 one local step leaves the client's parameters as client_init made
    them, exactly: every change a step makes to the model is a product with the learning rate
    (momentum, weight decay, duals, controls and perturbations included), from perturbed client
    and server states. Deliberate bug it catches (checked once): SCAFFOLD adding its control
    correction `c - c_m` to the parameters after the optimiser step instead of to the gradient
    (scaffold and fedgamma fail with and without jit; the others pass)."""
    before, after = self.variant(_local_step(name))(*_step_inputs(name, 0.0))
    chex.assert_trees_all_close(after.params, before.params, rtol=0.0, atol=0.0)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*ALL)
  def test_a_step_keeps_shapes_and_dtypes(self, name):
    """At a non-zero learning rate one local step moves the parameters and keeps the shapes and
    dtypes of the parameters the client received and of the whole local state (what the
    engine's scan over the local steps carries). Deliberate bug it catches (checked once):
    the momentum mix of FedCM returning its direction with an extra leading axis (a batch axis
    left in), which broadcasts the parameters to that shape (fedcm, mofedsam and fedwmsam, which
    share it, fail with and without jit; the others pass)."""
    inputs = _step_inputs(name, LR)
    before, after = self.variant(_local_step(name))(*inputs)
    received = _algorithm(name).eval_params(inputs[0])
    chex.assert_trees_all_equal_shapes_and_dtypes(after.params, received)
    chex.assert_trees_all_equal_shapes_and_dtypes(after, before)
    moved = max(float(jnp.abs(a - b).max())
                for a, b in zip(jax.tree.leaves(after.params), jax.tree.leaves(before.params)))
    assert moved > 1e-4, (name, moved)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(*REDUCTIONS)
  def test_reduction(self, name, overrides, reduced, reduced_overrides, knob):
    """One round of two clients (two local steps each, uniform weights): the clients' models
    and the server's model of `name` at the reducing setting equal those of the algorithm it
    reduces to; where the knob is round data, another value of it moves the result (the
    comparison is not vacuous). Deliberate bug it catches (checked once): MoFedSAM mixing the
    plain gradient instead of the SAM gradient into its momentum (the slides' typo; the
    MoFedSAM case fails with and without jit, the other three pass)."""
    round_fn = self.variant(_round(name, overrides))
    inputs = _round_inputs()
    alg = _algorithm(name, overrides)
    models, server = round_fn(*inputs, _round_info(alg, LR))
    ref = _algorithm(reduced, reduced_overrides)
    ref_models, ref_server = self.variant(_round(reduced, reduced_overrides))(
        *inputs, _round_info(ref, LR))
    chex.assert_trees_all_close(models, ref_models, rtol=1e-6, atol=1e-7)
    chex.assert_trees_all_close(server, ref_server, rtol=1e-6, atol=1e-7)
    if knob is not None:
      moved_models, _ = round_fn(*inputs, _round_info(alg, LR, knob))
      gap = max(float(jnp.abs(a - b).max())
                for a, b in zip(jax.tree.leaves(moved_models), jax.tree.leaves(ref_models)))
      assert gap > 1e-4, (name, knob, gap)

  @chex.variants(with_jit=True, without_jit=True)
  @parameterized.named_parameters(("fedavg", "fedavg"), ("scaffold", "scaffold"),
                                  ("feddyn", "feddyn"))
  def test_server_update_ignores_the_order_of_the_cohort(self, name):
    """Under uniform weights the server update of a cohort of three distinct uploads equals
    that of the same uploads in another order (weights and mask permuted with them), from a
    perturbed server state. Deliberate bug it catches (checked once): SCAFFOLD's server
    control update taking the first client's control delta times the cohort size instead of
    the sum over the cohort (the scaffold case fails with and without jit)."""
    alg = _algorithm(name)
    params = init_params(13)
    server = _perturbed(alg.server_init(params), 300)
    round_info = _round_info(alg, LR)
    shapes = jax.eval_shape(
        lambda: alg.client_finalize(
            alg.client_init(alg.broadcast(server, round_info), alg.client_state_init(params),
                            _client_info(), round_info),
            alg.broadcast(server, round_info), alg.client_state_init(params), _client_info(),
            round_info)[0])
    cohort = 3
    leaves, treedef = jax.tree.flatten(shapes)
    uploads = jax.tree.unflatten(treedef, [
        np_normal((cohort, *leaf.shape), 400 + i).astype(leaf.dtype)
        for i, leaf in enumerate(leaves)])
    weights = jnp.full((cohort,), 1.0 / cohort, jnp.float32)
    mask = jnp.ones((cohort,), jnp.float32)
    update = self.variant(alg.server_update)
    perm = np.array([2, 0, 1])
    out = update(server, uploads, weights, mask, round_info)
    shuffled = update(server, tmap(lambda u: u[perm], uploads), weights[perm], mask[perm],
                      round_info)
    chex.assert_trees_all_close(shuffled, out, rtol=1e-6, atol=1e-6)
