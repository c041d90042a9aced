"""Poisson sampling in the engine (`engine.sampling='poisson'`, `core.cohort`).

- each client joins a round with probability q = m / M, independently of the others; the
  realised cohort size is Binomial(M, q);
- the cohort is padded to the binomial quantile `poisson_max_cohort`; padding changes nothing;
  a larger draw is never cut: the padding grows (one more compile, logged) and stays;
- the draws and the padding depend on (seed, round) only: a resumed run draws and pads alike;
- an empty draw leaves the server state unchanged, unless DP: then the round releases its noise;
- under DP every real client weighs 1 / (q M) (the fixed denominator) and the aggregate's noise
  is sigma C / (q M) whatever the realised size;
- 'client' noise, an algorithm that reads the realised cohort size (with DP) and minimax tasks
  are refused in one line naming the field.
Every registered algorithm runs Poisson rounds (an empty one included) in
tests/test_algorithm_invariants.py, reusing that test's compiled round.
"""
from __future__ import annotations

from fractions import Fraction
import json
import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.algorithms import common
from fedjax_sharp.algorithms.fed_avg import fed_avg
from fedjax_sharp.algorithms.registry import build_algorithm
from fedjax_sharp.core import privacy
from fedjax_sharp.core.cohort import CohortSampler, poisson_max_cohort
from fedjax_sharp.core.engine import ExecutionConfig, RoundEngine
from fedjax_sharp.core.optimizers import local_sgd
from fedjax_sharp.errors import ConfigError
from fedjax_sharp.training import checkpoints
from fedjax_sharp.training import config as config_lib
from fedjax_sharp.training import loop
from fedjax_sharp.training import metrics as metrics_lib
from fedjax_sharp.training import report
from fedjax_sharp.training import workdir as workdir_lib

from algo_helpers import (apply_fn, assert_trees_close, assert_trees_equal, init_params,
                          make_problem, run_rounds)
from test_training import tiny_config

SIZES = (6, 9, 5, 8, 7, 3)
# Seed 61 of a 6-client Poisson sampler with m = 2 (q = 1/3) draws 3, 0, 3 clients in rounds
# 0, 1, 2: a round with clients, then an empty one.
EMPTY_SEED = 61


def _poisson(parts, m=2, seed=EMPTY_SEED, **kwargs):
  kwargs.setdefault("weighting", "uniform")
  return CohortSampler(parts, m, 4, local_epochs=1, seed=seed, sampling="poisson", **kwargs)


def _config(name, **block):
  c = config_lib.base_config()
  c.algorithm.name = name
  c.local.momentum = 0.5
  for k, v in block.items():
    c.algorithm[name][k] = v
  return c


# ---------------------------------------------------------------------------------- the draw
def test_inclusion_frequencies_and_cohort_sizes_match_q():
  """3,000 rounds of M = 40, m = 8 (q = 0.2): every client's inclusion frequency is within 4.5
  binomial standard errors (0.0073) of q, the cohort sizes have the mean q M and the variance
  M q (1 - q) of Binomial(M, q) (4.5 standard errors), and every draw is sorted, without
  repeats. Deliberate bug caught (checked once): drawing the first n clients (`np.arange(n)`)
  instead of n uniformly (client 0's frequency is then P(n >= 1), 0.99)."""
  big_m, m, rounds = 40, 8, 3000
  sampler = CohortSampler([np.array([i]) for i in range(big_m)], m, 1, seed=5,
                          sampling="poisson")
  q = m / big_m
  draws = [sampler.sample_clients(t) for t in range(rounds)]
  counts = np.zeros(big_m)
  for d in draws:
    assert np.all(np.diff(d) > 0)
    counts[d] += 1
  se = math.sqrt(q * (1 - q) / rounds)
  assert np.abs(counts / rounds - q).max() < 4.5 * se, counts / rounds
  sizes = np.array([len(d) for d in draws])
  assert [sampler.cohort_size(t) for t in range(100)] == sizes[:100].tolist()
  var = big_m * q * (1 - q)
  assert abs(sizes.mean() - m) < 4.5 * math.sqrt(var / rounds)
  # The sample variance's relative standard error is sqrt(2 / (T - 1)) (the binomial's excess
  # kurtosis (1 - 6 q (1 - q)) / (M q (1 - q)) = 0.006 is negligible here).
  assert abs(sizes.var(ddof=1) / var - 1) < 4.5 * math.sqrt(2 / (rounds - 1))


def _exact_tail(big_m, m, k):
  """P(Binomial(M, m / M) > k), exactly (rational arithmetic, independent of scipy)."""
  q = Fraction(m, big_m)
  return sum(math.comb(big_m, i) * q ** i * (1 - q) ** (big_m - i)
             for i in range(k + 1, big_m + 1))


@pytest.mark.parametrize("big_m,m,expected", [(100, 10, 27), (20, 5, 15), (6, 2, 6), (8, 8, 8)])
def test_the_padding_is_the_binomial_quantile(big_m, m, expected):
  """The padded size k is the smallest with P(n > k) <= 1e-6, checked with an exact tail sum.
  Deliberate bug caught (checked once): scipy's `isf` taken one lower (k - 1), a draw above the
  padding then 1e-6 < P <= 1.2e-6 per round (M = 100, m = 10)."""
  k = poisson_max_cohort(big_m, m)
  assert k == expected
  assert _exact_tail(big_m, m, k) <= Fraction(1, 10 ** 6)
  if k < big_m:
    assert _exact_tail(big_m, m, k - 1) > Fraction(1, 10 ** 6)


def test_draws_are_reproducible_and_a_resumed_sampler_pads_alike():
  """The same seed draws the same cohorts and plans, another seed others. A sampler that starts
  at round t (a resumed run) pads round t as one that built every round before it, also after
  larger draws grew the padding (a forced padding of 1): the padding is a function of the round.
  Deliberate bug caught (checked once): the padding kept as state that only `build` advances (a
  resumed sampler pads round t to `max_cohort`)."""
  _, parts = make_problem(SIZES, seed=1)
  a, b = _poisson(parts, seed=3, max_cohort=1), _poisson(parts, seed=3, max_cohort=1)
  other = _poisson(parts, seed=4)
  draws = [a.sample_clients(t).tolist() for t in range(12)]
  assert draws == [b.sample_clients(t).tolist() for t in range(12)]
  assert draws != [other.sample_clients(t).tolist() for t in range(12)]
  built = [a.build(t) for t in range(12)]
  for t in range(12):   # a sampler that starts at round t
    assert_trees_equal(_poisson(parts, seed=3, max_cohort=1).build(t), built[t])
  running = [max([1] + [len(d) for d in draws[:t + 1]]) for t in range(12)]
  assert [c.client_ids.shape[0] for c in built] == running
  assert len(set(running)) > 2    # the padding grew at least twice


# ---------------------------------------------------------------------------- weights, rounds
def test_weights_normalise_over_the_draw_or_use_the_fixed_denominator():
  """Without DP: 1 / n over the realised cohort (and an empty draw weighs nothing). With the
  fixed denominator (DP): 1 / (q M) = 1 / m for each real client, so the weights sum to n / m,
  and an empty draw keeps one padding slot (id M, no steps) at 1 / m for the noise. Explicit
  client ids (analysis) keep the weighting over them. Deliberate bug caught (checked once):
  1 / n under DP (the realised size in the denominator)."""
  _, parts = make_problem(SIZES, seed=1)
  plain, dp = _poisson(parts), _poisson(parts, fixed_denominator=True)
  assert [plain.cohort_size(t) for t in range(3)] == [3, 0, 3]
  c0, c1 = plain.build(0), plain.build(1)
  np.testing.assert_allclose(c0.weights, [1 / 3] * 3 + [0] * 3)
  assert not np.any(c1.weights) and np.all(c1.client_ids == 6)
  d0, d1 = dp.build(0), dp.build(1)
  np.testing.assert_allclose(d0.weights, [1 / 2] * 3 + [0] * 3)
  np.testing.assert_allclose(d1.weights, [1 / 2] + [0] * 5)
  assert np.all(d1.client_ids == 6) and not d1.step_mask.any()
  np.testing.assert_allclose(dp.build(0, client_ids=[1, 4]).weights, [0.5, 0.5])
  with pytest.raises(ValueError, match="aggregation='examples'"):
    _poisson(parts, weighting="examples", fixed_denominator=True)


def test_the_fixed_denominator_is_exact_in_float64():
  """1 / m in float64 under jax_enable_x64 (not a float32 value widened). Deliberate bug caught
  (checked once): the weights cast to float32."""
  _, parts = make_problem(SIZES, seed=1)
  with jax.enable_x64(True):
    cohort = _poisson(parts, m=3, fixed_denominator=True).build(0)
  assert cohort.weights.dtype == np.float64 and cohort.weights[0] == 1 / 3


@pytest.mark.parametrize("private", [False, True])
def test_padding_a_poisson_cohort_changes_nothing(private):
  """Three Poisson rounds of SCAFFOLD (per-client controls; a padding client's control delta is
  NaN, 0 / 0 steps), one of them empty, padded to the sampler's 6 clients and to 9: the same
  server state and client table to float rounding, with DP (server noise, the fixed denominator)
  too. Deliberate bug caught (checked once, by the run without DP): uniform weights 1 / C over
  the padded size instead of 1 / n."""
  data, parts = make_problem(SIZES, seed=7)
  alg = build_algorithm(_config("scaffold"), apply_fn)
  if private:
    alg = privacy.with_dp(alg, privacy.Mechanism(1.0, 0.7))
  sampler = _poisson(parts, fixed_denominator=private)
  base = run_rounds(alg, init_params(7), data, sampler, 3, key=5)
  wide = run_rounds(alg, init_params(7), data, sampler, 3, pad_to=9, key=5)
  assert base[3].trace_counts["round"] == 1
  assert_trees_close(wide[0], base[0], atol=2e-6, rtol=2e-5)
  assert_trees_close(wide[1], base[1], atol=2e-6, rtol=2e-5)


def test_a_larger_draw_compiles_once_more_and_keeps_every_client(caplog):
  """A padding forced down to 1 client: every round's cohort holds exactly its drawn clients
  (the local steps the round ran are theirs), the padding grows to the largest draw so far with
  one warning per growth, and the round is traced once per padded size. Deliberate bug caught
  (checked once): a draw cut to the padding (`ids[:size]`)."""
  data, parts = make_problem(SIZES, seed=7)
  sampler = _poisson(parts, seed=3, max_cohort=1)
  alg = fed_avg(apply_fn, local_sgd(0.0, 0.0))
  engine = RoundEngine(alg, len(parts), ExecutionConfig("vmap", local_loop="rolled"))
  server, table = engine.init(init_params(7))
  from fedjax_sharp.core.algorithm import RoundInfo
  with caplog.at_level(logging.WARNING):
    for t in range(12):
      cohort = sampler.build(t)
      ids = sampler.sample_clients(t)
      np.testing.assert_array_equal(cohort.client_ids[:len(ids)], ids)
      assert np.all(cohort.client_ids[len(ids):] == len(parts))
      server, table, metrics = engine.round(server, table, data, cohort,
                                            RoundInfo.at(t, 0.1, len(parts)), jax.random.key(0))
      assert int(metrics["steps"]) == int(sampler.steps_per_client[ids].sum())
  sizes = [sampler.padded_size(t) for t in range(12)]
  grown = sorted(set(sizes) - {1})
  warnings = [r.getMessage() for r in caplog.records if "more than the padded cohort" in
              r.getMessage()]
  assert len(warnings) == len(grown) >= 2, warnings
  assert engine.trace_counts["round"] == len(set(sizes))


def test_an_empty_draw_leaves_the_server_and_the_clients_unchanged():
  """FedDyn with a server dual: after a round with clients, an empty draw changes no bit of the
  server state or the client table (a zero aggregate would still move FedDyn's model by
  -h / alpha), and its metric sums are 0. Deliberate bug caught (checked once): the engine
  applying the server update to an empty cohort."""
  data, parts = make_problem(SIZES, seed=7)
  alg = build_algorithm(_config("feddyn"), apply_fn)
  sampler = _poisson(parts)
  one = run_rounds(alg, init_params(7), data, sampler, 1, key=5)
  two = run_rounds(alg, init_params(7), data, sampler, 2, key=5)
  assert_trees_equal(two[0], one[0])
  assert_trees_equal(two[1], one[1])
  assert all(float(v) == 0 for v in jax.tree.leaves(two[2]))
  moved = [np.abs(np.asarray(a) - np.asarray(b)).max()
           for a, b in zip(jax.tree.leaves(alg.eval_params(one[0])),
                           jax.tree.leaves(init_params(7)))]
  assert max(moved) > 1e-3


def test_dp_aggregate_has_the_fixed_denominator_mean_and_noise():
  """300 rounds of DP FedAvg under Poisson sampling (M = 8, m = 2) whose clients all upload the
  same vector u (18 coordinates, norm below C): the server's aggregate of round t is
  (n_t u + z_t) / (q M) with z_t ~ N(0, sigma^2 C^2). Its residual after removing n_t u / m has
  mean 0 (4 standard errors) and std sigma C / m within 4% (the sample std's relative standard
  error over 5,400 coordinates is 1%), empty rounds included (they happen: q = 1/4, (3/4)^8 =
  10% of rounds), and the aggregate's mean over rounds is u E[n] / m = u (4 standard errors of
  its spread). Deliberate bug caught (checked once): the realised size n in the denominator
  (weights 1 / n): the residual is then u (1 - n/m) + z / n."""
  rounds, m, sigma, clip_norm = 300, 2, 0.5, 3.0
  data, parts = make_problem((3,) * 8, seed=2)
  params = init_params(2)
  u = jax.tree.map(lambda p: jnp.full(p.shape, 0.5, p.dtype), params)
  base = fed_avg(apply_fn, local_sgd(0.0, 0.0))

  def constant_upload(local, bcast, state, info, round_info):
    return u, state
  import dataclasses
  alg = privacy.with_dp(dataclasses.replace(base, client_finalize=constant_upload),
                        privacy.Mechanism(clip_norm, sigma))
  sampler = CohortSampler(parts, m, 3, local_epochs=1, seed=9, sampling="poisson",
                          weighting="uniform", fixed_denominator=True)
  engine = RoundEngine(alg, len(parts), ExecutionConfig("vmap", local_loop="rolled"))
  server, table = engine.init(params)
  from fedjax_sharp.core.algorithm import RoundInfo
  flat = lambda s: np.concatenate([np.ravel(np.asarray(x, np.float64))
                                   for x in jax.tree.leaves(alg.eval_params(s))])
  aggregates, sizes = [], []
  before = flat(server)
  for t in range(rounds):
    server, table, _ = engine.round(server, table, data, sampler.build(t),
                                    RoundInfo.at(t, 0.1, len(parts)), jax.random.key(4))
    after = flat(server)
    aggregates.append(before - after)     # FedAvg: w <- w - aggregate
    sizes.append(sampler.cohort_size(t))
    before = after
  aggregates, sizes = np.array(aggregates), np.array(sizes)
  assert engine.trace_counts["round"] == 1 and (sizes == 0).sum() >= 10
  u_flat = np.full(aggregates.shape[1], 0.5)
  residual = aggregates - sizes[:, None] * u_flat / m
  scale = sigma * clip_norm / m
  assert abs(residual.std() / scale - 1) < 0.04, residual.std() / scale
  assert abs(residual.mean()) < 4 * scale / math.sqrt(residual.size)
  empty = residual[sizes == 0]
  assert abs(empty.std() / scale - 1) < 0.2     # ~430 values: the noise is released there too
  spread = math.sqrt((len(parts) * 0.25 * 0.75) * 0.25 / m ** 2 + scale ** 2)
  assert np.abs(aggregates.mean(0) - u_flat).max() < 4 * spread / math.sqrt(rounds)


def test_adaptive_clipping_counts_over_the_fixed_denominator():
  """Adaptive clipping (no noise, so the step is exact) under Poisson sampling: round 0 draws 3
  clients for m = 2, every upload within C_0, so the count's mean is 3 (1 - 1/2) / 2 + 1/2 =
  1.25 and C_1 = C_0 exp(-0.2 (1.25 - 0.5)); the empty round 1 counts 1/2. Deliberate bug caught
  (checked once): the count divided by the realised cohort size (1.0 in round 0)."""
  import dataclasses
  data, parts = make_problem(SIZES, seed=7)
  params = init_params(7)
  u = jax.tree.map(lambda p: jnp.full(p.shape, 0.01, p.dtype), params)   # norm 0.042 < C_0
  base = fed_avg(apply_fn, local_sgd(0.0, 0.0))
  alg = privacy.with_dp(
      dataclasses.replace(base, client_finalize=lambda local, b, state, i, r: (u, state)),
      privacy.Mechanism(1.0, 0.0, adaptive=True, clip_quantile=0.5, clip_lr=0.2))
  sampler = _poisson(parts, fixed_denominator=True)
  one = run_rounds(alg, params, data, sampler, 1, key=5)[0]
  two = run_rounds(alg, params, data, sampler, 2, key=5)[0]
  c1 = math.exp(-0.2 * (1.25 - 0.5))
  assert float(one.clip_norm) == pytest.approx(c1, rel=1e-6)
  assert float(two.clip_norm) == pytest.approx(c1 * math.exp(-0.2 * (0.5 - 0.5)), rel=1e-6)


# --------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("overrides,field", [
    ({"engine__sampling": "bernoulli"}, "engine.sampling"),
    ({"engine__sampling": "poisson", "dp__enabled": True, "dp__noise": "client"}, "dp.noise"),
    ({"engine__sampling": "poisson", "algorithm__name": "dp_fedsam"},
     "algorithm.dp_fedsam.noise"),
    ({"engine__sampling": "poisson", "dp__enabled": True, "algorithm__name": "fedmoswa"},
     "engine.sampling"),
    ({"engine__sampling": "poisson", "dp__enabled": True, "algorithm__name": "fedgloss",
      "algorithm__fedgloss__dual_scale": "code"}, "engine.sampling"),
    ({"engine__sampling": "poisson", "task__name": "quadratic", "algorithm__name": "fess_gda",
      "clients_per_round": 4}, "engine.sampling"),
    ({"engine__sampling": "poisson", "dp__enabled": True, "dp__accountant": "rdp"},
     "dp.accountant"),
])
def test_refusals_are_one_line_naming_the_field(overrides, field):
  """Deliberate bug caught (checked once): the 'client' noise rule dropped (the run would add
  n sigma^2 C^2 / m of noise to the sum, too little when n < m)."""
  with pytest.raises(ConfigError) as e:
    config_lib.validate(tiny_config(**overrides))
  message = str(e.value)
  assert message.startswith(field) and "\n" not in message, message


@pytest.mark.parametrize("overrides", [
    {"engine__sampling": "poisson", "algorithm__name": "fedmoswa"},          # without DP
    {"engine__sampling": "poisson", "dp__enabled": True},
    {"engine__sampling": "poisson", "algorithm__name": "dp_fedsam",
     "algorithm__dp_fedsam__noise": "server"},
])
def test_what_poisson_sampling_accepts(overrides):
  config_lib.validate(tiny_config(**overrides))


def test_the_sampler_is_a_setting_field():
  """A workdir or checkpoint of one sampler is not resumed by the other; a 'fixed' run keeps
  the fingerprint it had before the field existed. Deliberate bug caught (checked once):
  `engine.sampling` left out of the setting (the engine block is otherwise not one)."""
  fixed, poisson = tiny_config(), tiny_config(engine__sampling="poisson")
  saved = json.loads(config_lib.resolved_setting(fixed).to_json_best_effort())
  diffs = workdir_lib.setting_differences(saved, poisson)
  assert "engine.sampling: saved 'fixed', now 'poisson'" in diffs, diffs
  del saved["engine"]["sampling"]       # a config.json written before the field existed
  assert workdir_lib.setting_differences(saved, fixed) == []
  assert checkpoints.fingerprint(fixed) != checkpoints.fingerprint(poisson)


# ------------------------------------------------------------------------------- end to end
def test_a_poisson_dp_run_resumes_exactly_and_names_its_sampler(tmp_path):
  """The tiny DP run (6 clients, q = 1/6, server noise, client metrics recorded) under Poisson
  sampling, 5 rounds of 2, 2, 2, 0 and 1 clients: a run resumed after round 2 records the same cohort sizes, losses, accuracies and
  epsilons as an uninterrupted one; the empty round records no training loss (None), and the
  summary's dp block and the comparison table name the sampler (the table with the accountant,
  'auto' -> pld_poisson, and delta). Deliberate bug caught (checked
  once): the cohort drawn from one generator advanced round by round (a resumed run draws
  other cohorts)."""
  kw = dict(engine__sampling="poisson", clients_per_round=1, dp__enabled=True,
            dp__clip_norm=1.0, dp__noise_multiplier=0.3, rounds=5, seed=5,
            dp__record_client_metrics=True)
  straight = tmp_path / "straight"
  summary = loop.run(tiny_config(**kw), str(straight), progress=False)
  resumed = tmp_path / "resumed"
  loop.run(tiny_config(**{**kw, "rounds": 2}, checkpoint_every=1), str(resumed), progress=False)
  loop.run(tiny_config(**kw, checkpoint_every=1), str(resumed), progress=False)
  a = metrics_lib.read_jsonl(str(straight / "metrics.jsonl"))
  b = metrics_lib.read_jsonl(str(resumed / "metrics.jsonl"))
  for key in ("clients", "train_loss", "test_loss", "test_accuracy", "dp_epsilon"):
    assert [r[key] for r in a] == [r[key] for r in b], key
  sizes = [r["clients"] for r in a]
  assert 0 in sizes and len(set(sizes)) > 1, sizes
  assert all((r["train_loss"] is None) == (r["clients"] == 0) for r in a)
  assert summary["dp"]["sampling"] == "poisson"
  rows = report.table_rows({"dp_fedavg": [{"records": a, "summary": summary}]}, 2, 0.0)
  table = report.to_markdown(rows, 2, 0.0)
  assert (f"{summary['dp_epsilon']:.3g} (delta 1e-05, pld_poisson, poisson sampling)"
          in table), table


def test_a_poisson_dp_run_records_nothing_that_reveals_the_draw(tmp_path):
  """Amplification by sampling assumes the draw stays hidden: under DP (client metrics not
  asked for) a Poisson run records neither the realised cohort size nor bytes that depend on
  it (they count the expected cohort, clients_per_round, every round). Deliberate bug caught:
  the bytes counters left at the realised cohort (their round-to-round changes are the draw)."""
  loop.run(tiny_config(engine__sampling="poisson", clients_per_round=2, dp__enabled=True,
                       dp__noise_multiplier=0.3, rounds=5, seed=5), str(tmp_path),
           progress=False)
  records = metrics_lib.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert all("clients" not in r and "train_loss" not in r for r in records)
  assert len({r["bytes_down"] for r in records}) == 1
  assert [r["bytes_total"] for r in records] == [
      (t + 1) * 2 * records[0]["bytes_down"] for t in range(5)]
