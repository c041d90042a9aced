"""Adaptive clipping (Andrew et al., NeurIPS 2021) inside `core.privacy.with_dp`.

A stub algorithm uploads a fixed vector per client (client m's norm is NORMS[m]), so the clip
indicator each client reports, and the quantile the clip should find, are known here.

Deliberate bugs each catches (checked once): the step's sign flipped (C runs away from the
quantile); the indicator taken after clipping (every upload "unclipped"); the count's noise
scaled like an update (std sigma C); the update noise left at sigma instead of sigma_update;
C_t not carried in the server state (it would not move, nor survive a checkpoint).
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.core import privacy, tree
from fedjax_sharp.core.algorithm import FederatedAlgorithm, RoundInfo
from fedjax_sharp.core.cohort import CohortSampler
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine, TrainData
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import loop

from test_training import tiny_config

M, DIM = 200, 8
NORMS = np.exp(np.random.default_rng(0).normal(0.0, 0.5, M))   # lognormal update norms


def stub_algorithm():
  """Uploads NORMS[m] * e_0 for client m; the server keeps the weighted mean of the uploads."""
  norms = jnp.asarray(NORMS)

  def client_finalize(local, bcast, client_state, info, round_info):
    return jnp.zeros((DIM,)).at[0].set(norms[info.client_id]), client_state

  return FederatedAlgorithm(
      name="stub", server_init=lambda p: {"mean": jnp.zeros((DIM,))},
      client_state_init=lambda p: (), broadcast=lambda s, r: (),
      client_init=lambda b, cs, i, r: jnp.zeros(()),
      local_step=lambda st, batch, key, r: (st, {"loss_sum": jnp.zeros(()),
                                                 "examples": jnp.zeros(())}),
      client_finalize=client_finalize,
      server_update=lambda s, u, w, m, r: {"mean": tree.weighted_sum(u, w)},
      eval_params=lambda s: s)


def run(mechanism, rounds, cohort=20, seed=0):
  """Per round: (C_t before the round, the aggregate) under `mechanism`."""
  alg = privacy.with_dp(stub_algorithm(), mechanism)
  parts = [np.array([m]) for m in range(M)]
  sampler = CohortSampler(parts, cohort, 1, local_steps=1, seed=seed, weighting="uniform")
  engine = RoundEngine(alg, M, ExecutionConfig("vmap", local_loop="rolled"))
  data = TrainData(jnp.zeros((M, 1)), jnp.zeros((M,), jnp.int32))
  server, table = engine.init({"w": jnp.zeros(())})
  out = []
  for t in range(rounds):
    c = float(server.clip_norm)
    server, table, _ = engine.round(server, table, data, sampler.build(t), RoundInfo.at(t, 0.1, M),
                                    jax.random.key(seed))
    out.append((c, np.asarray(server.inner["mean"])))
  return out, sampler


def mech(**kw):
  return privacy.Mechanism(**{**dict(clip_norm=0.2, noise_multiplier=0.0, adaptive=True,
                                     clip_quantile=0.5, clip_lr=0.2, clip_count_noise=1.0), **kw})


def test_one_step_is_the_geometric_rule():
  (c0, _), (c1, _) = run(mech(clip_norm=1.0), 2)[0][:2]
  cohort = np.asarray(run(mech(), 1)[1].build(0).client_ids)
  unclipped = float(np.mean(NORMS[cohort] <= 1.0))
  assert c0 == 1.0
  assert c1 == pytest.approx(math.exp(-0.2 * (unclipped - 0.5)), rel=1e-6)


@pytest.mark.parametrize("quantile", [0.2, 0.5, 0.8])
def test_the_clip_converges_to_the_quantile_of_the_update_norms(quantile):
  """From C_0 = 0.2, far below every norm: after 150 rounds of 20 clients the mean C of the last
  50 rounds is the population's quantile to within 6% (the round-to-round jitter of a 20-client
  count at lr 0.2 is ~2%), and on the right side of its neighbours."""
  out, _ = run(mech(clip_quantile=quantile), 150)
  c = np.mean([ci for ci, _ in out[-50:]])
  want = np.quantile(NORMS, quantile)
  assert c == pytest.approx(want, rel=0.06)
  assert np.quantile(NORMS, quantile - 0.1) < c < np.quantile(NORMS, quantile + 0.1)


def test_noised_counts_still_converge_and_the_update_noise_is_sigma_update():
  """sigma = 0.5 with a count noise of 0.3 clients: updates carry sigma_update =
  (0.5^-2 - 0.6^-2)^-1/2 = 0.905 (not 0.5) times C_t; the clip still finds the median."""
  m = mech(noise_multiplier=0.5, clip_count_noise=0.3)
  assert m.update_noise_multiplier == pytest.approx((0.5 ** -2 - 0.6 ** -2) ** -0.5)
  out, sampler = run(m, 150)
  assert np.mean([c for c, _ in out[-50:]]) == pytest.approx(np.median(NORMS), rel=0.1)
  # Coordinates 1..7 of the mean are pure noise: std sigma_update * C_t / m.
  ratios = np.concatenate([agg[1:] / (m.update_noise_multiplier * c / 20) for c, agg in out])
  assert np.std(ratios) == pytest.approx(1.0, rel=0.1)
  assert abs(np.mean(ratios)) < 0.1


def test_refusals_name_the_field():
  with pytest.raises(ConfigError, match=r"dp.adaptive_clip .* use dp.clip='global'"):
    mech(clip="per_tensor")
  with pytest.raises(ConfigError, match=r"dp.clip_count_noise=0.2 must exceed "
                                        r"dp.noise_multiplier / 2 = 0.5"):
    mech(noise_multiplier=1.0, clip_count_noise=0.2)


def test_a_run_records_the_clip_and_resumes_exactly(tmp_path):
  """metrics.jsonl's dp_clip_norm moves; C_t rides in the checkpoint."""
  kw = dict(dp__enabled=True, dp__adaptive_clip=True, dp__clip_norm=0.05,
            dp__noise_multiplier=0.1, dp__clip_count_noise=0.5, rounds=4)
  straight = loop.run(tiny_config(**kw), str(tmp_path / "a"), progress=False)
  loop.run(tiny_config(**{**kw, "rounds": 2}, checkpoint_every=1), str(tmp_path / "b"),
           progress=False)
  resumed = loop.run(tiny_config(**kw, checkpoint_every=1), str(tmp_path / "b"), progress=False)
  import json   # pylint: disable=g-import-not-at-top
  read = lambda d: [json.loads(l)["dp_clip_norm"] for l in open(tmp_path / d / "metrics.jsonl")]
  assert read("a") == read("b")
  assert len(set(read("a"))) == 4 and read("a")[0] != 0.05
  assert straight["dp_epsilon"] == resumed["dp_epsilon"]
