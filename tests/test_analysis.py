"""Analysis toolbox: formulas checked against closed forms and hand-made data."""
import itertools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.analysis import clients, landscape, sharpness
from fedjax_sharp.analysis.hessian import cross_entropy_batches

import cli_runner


def quadratic(a_matrix, b_vec):
  """loss(w) = 1/2 w^T A w + b^T w on every batch (the mask only weights batches)."""
  a_matrix, b_vec = jnp.asarray(a_matrix), jnp.asarray(b_vec)

  def loss_fn(params, batch):
    w = jnp.concatenate([params["u"], params["v"].ravel()])
    return 0.5 * w @ a_matrix @ w + b_vec @ w + 0.0 * jnp.sum(batch["mask"])
  return loss_fn


def spd(dim, seed=0):
  rng = np.random.default_rng(seed)
  q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
  return (q * rng.uniform(0.5, 3.0, dim)) @ q.T


BATCHES = [{"mask": jnp.ones(4, bool)}, {"mask": jnp.array([True, False, False, False])}]
PARAMS = {"u": jnp.array([0.3, -1.0]), "v": jnp.array([[0.5, 2.0], [-0.7, 0.1]])}


def test_hutchinson_trace_of_a_known_hessian():
  """The estimate and its standard error against their exact laws: for a 6 x 6 Hessian A, the
  64 Rademacher probes enumerated give the distribution of v^T A v (mean tr A, variance
  2 sum_{i != j} A_ij^2, fourth central moment mu4). With n probes the mean lies within Z
  standard errors sqrt(var / n) of tr A, and stderr^2 * n (the sample variance) within Z
  standard errors sqrt(mu4 / n - var^2 (n - 3) / (n (n - 1))) of var (Z = 4.5; the key is
  fixed).

  Deliberate bugs it catches: the standard error divided by n instead of sqrt(n) (63x too
  small), or not divided at all; a probe's quadratic form off by a factor; basis probes
  reporting a nonzero standard error."""
  a = spd(6)
  loss_fn = quadratic(a, np.zeros(6))
  n = 4000
  est = sharpness.hutchinson_trace(loss_fn, PARAMS, BATCHES, num_probes=n, chunk=500,
                                   key=jax.random.key(3))
  assert est["trace"] == pytest.approx(np.trace(a), rel=0.02)
  assert 0 < est["stderr"] < 0.02 * np.trace(a)
  probes = np.array(list(itertools.product([-1.0, 1.0], repeat=6)))
  forms = np.einsum("pi,ij,pj->p", probes, a, probes)     # every Rademacher probe, equally likely
  var, mu4 = forms.var(), np.mean((forms - forms.mean()) ** 4)
  assert forms.mean() == pytest.approx(np.trace(a), rel=1e-12)
  assert var == pytest.approx(2 * np.sum((a - np.diag(np.diag(a))) ** 2), rel=1e-12)
  z = 4.5
  assert abs(est["trace"] - np.trace(a)) <= z * np.sqrt(var / n)
  sample_var = est["stderr"] ** 2 * n
  assert abs(sample_var - var) <= z * np.sqrt(mu4 / n - var ** 2 * (n - 3) / (n * (n - 1)))
  assert est["num_probes"] == n
  # Basis probes give the trace exactly (for any Hessian, so also a diagonal one).
  diag = np.diag([0.5, 1.0, 2.0, -0.3, 4.0, 1.5])
  exact = sharpness.hutchinson_trace(quadratic(diag, np.ones(6)), PARAMS, BATCHES,
                                     probes="basis", chunk=4)
  assert exact["trace"] == pytest.approx(np.trace(diag), abs=1e-5)
  assert exact["num_probes"] == 6 and exact["stderr"] == 0.0
  with pytest.raises(ValueError, match="probes"):
    sharpness.hutchinson_trace(loss_fn, PARAMS, BATCHES, probes="gaussian")


def test_sam_sharpness_of_a_quadratic_is_its_closed_form():
  a, b = spd(6, seed=1), np.linspace(-1, 1, 6)
  w = np.concatenate([np.asarray(PARAMS["u"]), np.asarray(PARAMS["v"]).ravel()])
  g = a @ w + b
  rho = 0.3
  e = rho * g / np.linalg.norm(g)
  expected = g @ e + 0.5 * e @ a @ e     # L(w + e) - L(w), exactly, for a quadratic
  got = sharpness.sam_sharpness(quadratic(a, b), PARAMS, BATCHES, rho=rho)
  assert got["sam_sharpness"] == pytest.approx(expected, rel=1e-5)
  assert got["grad_norm"] == pytest.approx(np.linalg.norm(g), rel=1e-5)


def _model():
  rng = np.random.default_rng(0)
  params = {"kernel": jnp.asarray(rng.normal(size=(4, 3)).astype(np.float32)),
            "bias": jnp.asarray(rng.normal(size=(3,)).astype(np.float32))}
  apply_fn = lambda p, x: x.reshape(x.shape[0], -1) @ p["kernel"] + p["bias"]
  x = rng.normal(size=(37, 2, 2)).astype(np.float32)
  y = rng.integers(0, 3, 37).astype(np.int32)
  return params, apply_fn, x, y


def test_interpolation_endpoints_are_the_two_models_losses():
  params, apply_fn, x, y = _model()
  other = jax.tree.map(lambda p: p + 0.5, params)
  loss_fn = sharpness.cross_entropy_loss(apply_fn)
  batches = cross_entropy_batches(x, y, 16)      # 3 batches, the last one padded
  line = landscape.interpolate(loss_fn, params, other, batches, num=5, t_min=0.0, t_max=1.0,
                               chunk=2)
  assert line["loss"][0] == pytest.approx(sharpness.dataset_loss(loss_fn, params, batches),
                                          rel=1e-5)
  assert line["loss"][-1] == pytest.approx(sharpness.dataset_loss(loss_fn, other, batches),
                                           rel=1e-5)
  # The example-weighted dataset loss equals the plain mean over all 37 examples.
  logits = apply_fn(params, x)
  full = -np.mean(np.asarray(jax.nn.log_softmax(logits))[np.arange(37), y])
  assert line["loss"][0] == pytest.approx(full, rel=1e-5)


def test_filter_normalisation_matches_each_weight_filters_norm():
  params = {"conv": jnp.asarray(np.random.default_rng(1).normal(size=(3, 3, 2, 5)),
                                jnp.float32),
            "dense": jnp.asarray(np.random.default_rng(2).normal(size=(7, 4)), jnp.float32),
            "bias": jnp.ones((4,))}
  d = landscape.filter_normalized_direction(jax.random.key(0), params)
  for name in ("conv", "dense"):
    axes = tuple(range(params[name].ndim - 1))
    np.testing.assert_allclose(np.sqrt(np.sum(np.asarray(d[name]) ** 2, axis=axes)),
                               np.sqrt(np.sum(np.asarray(params[name]) ** 2, axis=axes)),
                               rtol=1e-5)
  assert not np.any(np.asarray(d["bias"]))     # biases are not perturbed (ignore='biasbn')


def test_surface_centre_is_the_model_and_files_are_written(tmp_path):
  params, apply_fn, x, y = _model()
  loss_fn = sharpness.cross_entropy_loss(apply_fn)
  acc_fn = lambda p, b: jnp.sum((jnp.argmax(apply_fn(p, b["x"]), -1) == b["y"]) * b["mask"]) \
      / jnp.sum(b["mask"])
  batches = cross_entropy_batches(x, y, 16)
  surf = landscape.surface(loss_fn, params, batches, jax.random.key(0), num=5, span=0.5,
                           acc_fn=acc_fn, chunk=4)
  assert surf["loss"].shape == (5, 5)
  assert surf["loss"][2, 2] == pytest.approx(sharpness.dataset_loss(loss_fn, params, batches),
                                             rel=1e-5)
  # Moving along direction 1 only (beta = 0 row) is the 1D interpolation towards params + d1.
  d1, d2 = (landscape.filter_normalized_direction(k, params)
            for k in jax.random.split(jax.random.key(0)))
  far = jax.tree.map(lambda p, d: p + 0.5 * d, params, d1)
  assert surf["loss"][2, 4] == pytest.approx(sharpness.dataset_loss(loss_fn, far, batches),
                                             rel=1e-5)
  png, npz = landscape.save_surface(surf, str(tmp_path / "land"), title="test")
  assert os.path.getsize(png) > 1000
  np.testing.assert_allclose(np.load(npz)["loss"], surf["loss"])


def test_surfaces_side_by_side_share_one_colour_scale(tmp_path):
  axis = np.linspace(-1, 1, 5)
  flat = {"alpha": axis, "beta": axis, "loss": 0.1 * np.add.outer(axis ** 2, axis ** 2)}
  sharp = {"alpha": axis, "beta": axis, "loss": 1.0 + 10 * np.add.outer(axis ** 2, axis ** 2)}
  png, levels = landscape.save_surfaces({"flat": flat, "sharp": sharp}, str(tmp_path / "s.png"))
  both = np.concatenate([flat["loss"].ravel(), sharp["loss"].ravel()])
  assert levels[0] == pytest.approx(0.0) and levels[-1] == pytest.approx(np.percentile(both, 95))
  assert os.path.getsize(png) > 1000
  with pytest.raises(ValueError, match="at least one"):
    landscape.save_surfaces({}, str(tmp_path / "none.png"))


def test_client_percentiles_on_hand_made_clients():
  per_class = np.array([1.0, 0.5, 0.0])
  counts = np.array([[10, 0, 0],     # only class 0 -> 1.0
                     [0, 10, 0],     # only class 1 -> 0.5
                     [5, 5, 0],      # -> 0.75
                     [0, 0, 4],      # only class 2 -> 0.0
                     [2, 0, 2]])     # -> 0.5
  acc = clients.reweighted_client_accuracy(per_class, counts)
  np.testing.assert_allclose(acc, [1.0, 0.5, 0.75, 0.0, 0.5])
  got = clients.client_percentiles(acc, trained=np.array([True, True, False, False, True]))
  assert got["client_acc_p50"] == 0.5
  assert got["client_acc_p10"] == pytest.approx(0.2)      # between 0.0 and 0.5 at 40%
  assert got["client_acc_p90"] == pytest.approx(0.9)      # between 0.75 and 1.0 at 60%
  assert (got["client_acc_worst"], got["worst_client"]) == (0.0, 3)
  assert got["trained_acc"] == pytest.approx(2 / 3)
  assert got["untrained_acc"] == pytest.approx(0.375)
  assert got["participation_gap"] == pytest.approx(2 / 3 - 0.375)
  # Per-class accuracy from a model, and per-client accuracy from per-example correctness.
  params, apply_fn, x, y = _model()
  pc = clients.per_class_accuracy(apply_fn, params, x, y, 3, batch_size=16)
  pred = np.argmax(np.asarray(apply_fn(params, x)), -1)
  np.testing.assert_allclose(pc, [np.mean(pred[y == c] == c) for c in range(3)])
  np.testing.assert_allclose(
      clients.client_accuracy_from_examples(pred == y, [np.arange(10), np.arange(10, 37)]),
      [np.mean((pred == y)[:10]), np.mean((pred == y)[10:])])


def test_landscape_cli_on_a_finished_run(tmp_path):
  import sys
  from fedjax_sharp.training import config as config_lib, loop
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for seed in (0, 1):
    c = config_lib.base_config()
    c.data.source, c.data.name, c.data.num_clients = "embedded", "digits", 4
    c.clients_per_round, c.model.name, c.local.steps, c.rounds = 2, "linear", 2, 2
    c.eval.last_n, c.seed = 1, seed
    loop.run(c, str(tmp_path / f"s{seed}"), progress=False)
  proc = cli_runner.run(
      [sys.executable, os.path.join(root, "experiments", "landscape.py"),
       f"--workdir={tmp_path / 's0'}", f"--other={tmp_path / 's1'}", "--num=3",
       "--examples=100", "--sharpness", "--trace_probes=4"],
      env=dict(os.environ, PYTHONPATH=root), capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-2000:]
  for name in ("landscape.png", "landscape.npz", "interpolation.png", "analysis.json"):
    assert os.path.exists(tmp_path / "s0" / name), name
  # The long parts show the training's progress line (here piped: its log lines), naming the
  # run, the step and the time left (the command used to print nothing until it ended).
  for line in ("landscape fedavg seed 0 | point 9/9 | ", "path fedavg seed 0 | point 21/21 | ",
               "trace fedavg seed 0 | probe 4/4 | "):
    assert line in proc.stderr and "| eta " in proc.stderr.split(line)[1].split("\n")[0], line
  import json
  stored = json.load(open(tmp_path / "s0" / "analysis.json"))
  assert stored["final_sharpness"]["trace_probes"] == 4
  assert np.load(tmp_path / "s0" / "landscape.npz")["loss"].shape == (3, 3)


def _softmax_regression_final(run_dir, examples):
  """(final parameters, float64 flat inputs, softmax probabilities) of the linear model of a
  `_tiny_run_config` run saved in `run_dir` on the first `examples` test examples."""
  from fedjax_sharp.training import loop
  exp = loop.build_experiment(_tiny_run_config())
  params = loop.load_params(str(run_dir / loop.FINAL_PARAMS), exp.init_params)
  x = np.asarray(exp.eval_preprocess(exp.dataset.x_test[:examples], None), np.float64)
  x = x.reshape(examples, -1)
  logits = x @ np.asarray(params["out"]["kernel"], np.float64) + np.asarray(
      params["out"]["bias"], np.float64)
  prob = np.exp(logits - logits.max(1, keepdims=True))
  return params, x, prob / prob.sum(1, keepdims=True)


def _softmax_regression_top_eigenvalue(run_dir, examples):
  """The top eigenvalue of the dense float64 Hessian of that model's mean cross-entropy:
  mean_n [x_n; 1][x_n; 1]^T (x) (diag p_n - p_n p_n^T)."""
  _, x, prob = _softmax_regression_final(run_dir, examples)
  n, k = prob.shape
  x1 = np.concatenate([x, np.ones((n, 1))], 1)
  curvature = prob[:, :, None] * np.eye(k) - prob[:, :, None] * prob[:, None, :]
  hessian = (x1[:, :, None] * x1[:, None, :]).reshape(n, -1).T @ curvature.reshape(n, -1) / n
  size = x1.shape[1] * k           # rows (i, j, k, l) -> ((i, k), (j, l)): a Kronecker product
  hessian = hessian.reshape(x1.shape[1], x1.shape[1], k, k).transpose(0, 2, 1, 3)
  return float(np.linalg.eigvalsh(hessian.reshape(size, size))[-1])


def _softmax_regression_hutchinson(run_dir, examples, probes):
  """(trace estimate, its standard error) of Hutchinson's estimator (default key) on the first
  `examples` test examples for the final linear model of a `_tiny_run_config` run saved in
  `run_dir`, as `analyse.py --parts=sharpness` stores it and the training loop logs it,
  recomputed in float64 NumPy: the Hessian of the mean cross-entropy of softmax regression in
  the direction v is mean_n [sum_k p_nk u_nk^2 - (sum_k p_nk u_nk)^2], u_n = V^T x_n + v_b
  the change of the logits along v; probe i is Rademacher from fold_in(key(0), i) over the
  flat parameters; the standard error is the probes' sample standard deviation / sqrt(probes).

  Deliberate bugs it catches: a stored standard error divided by n instead of sqrt(n), or
  with ddof=0 (a factor sqrt(2) at two probes); a trace of other probes, examples or
  parameters."""
  from jax.flatten_util import ravel_pytree
  params, x, prob = _softmax_regression_final(run_dir, examples)
  flat, unravel = ravel_pytree(params)
  forms = []
  for i in range(probes):
    v = unravel(jax.random.rademacher(jax.random.fold_in(jax.random.key(0), i), flat.shape,
                                      flat.dtype))
    u = x @ np.asarray(v["out"]["kernel"], np.float64) + np.asarray(v["out"]["bias"], np.float64)
    forms.append(np.mean((prob * u ** 2).sum(1) - (prob * u).sum(1) ** 2))
  return float(np.mean(forms)), float(np.std(forms, ddof=1) / np.sqrt(probes))


def test_analyse_cli_stores_every_part_and_resumes(tmp_path):
  import json
  import sys
  from fedjax_sharp.training import loop
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  run_dir = tmp_path / "run"
  loop.run(_tiny_run_config(), str(run_dir), progress=False)

  def analyse(*flags):
    return cli_runner.run(
        [sys.executable, os.path.join(root, "experiments", "analyse.py"),
         f"--workdir={run_dir}", *flags], env=dict(os.environ, PYTHONPATH=root),
        capture_output=True, text=True, timeout=600)
  small = ["--examples=100", "--iters=3", "--trace_probes=2", "--gl_clients=2",
           "--gl_examples=60", "--grid=3"]
  proc = analyse(*small, "--parts=hessian,sharpness,clients,global_local")
  assert proc.returncode == 0, proc.stderr[-2000:]
  for line in ("lambda_max fedavg seed 0 | iteration 3/3 | ", "trace fedavg seed 0 | probe 2/2",
               "global vs local fedavg seed 0 | iteration 21/21 | "):
    assert line in proc.stderr, (line, proc.stderr[-2000:])
  stored = json.load(open(run_dir / "analysis.json"))
  assert set(stored) == {"final_sharpness", "final_clients", "final_global_local"}
  assert stored["final_sharpness"]["trace_probes"] == 2
  trace, stderr = _softmax_regression_hutchinson(run_dir, examples=100, probes=2)
  assert stored["final_sharpness"]["hessian_trace"] == pytest.approx(trace, rel=1e-4)
  assert stored["final_sharpness"]["hessian_trace_stderr"] == pytest.approx(stderr, rel=1e-4)
  assert stored["final_global_local"]["clients"] == [0, 1]
  assert json.load(open(run_dir / "hessian.json"))["final"]["iters"] == 3
  # --check: the landscape is missing, so asking for every part fails and names it.
  proc = analyse("--check")
  assert proc.returncode == 1 and "landscape     missing" in proc.stdout
  assert analyse("--check", "--parts=hessian,clients").returncode == 0
  # A second run computes only what is missing: the stored parts keep their values. More
  # examples than the test split has: the record says how many were used (it said 2000 for a
  # 359-example test set).
  proc = analyse("--examples=2000", "--grid=3", "--trace_probes=50")
  assert proc.returncode == 0, proc.stderr[-2000:]
  again = json.load(open(run_dir / "analysis.json"))
  assert again["final_sharpness"] == stored["final_sharpness"]
  assert again["final_landscape"]["grid"] == 3
  assert again["final_landscape"]["examples"] == 359      # the digits' test split
  assert analyse("--check").returncode == 0
  proc = analyse("--parts=hessian,curvature")
  assert proc.returncode != 0 and "curvature" in proc.stderr


def _tiny_run_config(**analysis):
  from fedjax_sharp.training import config as config_lib
  c = config_lib.base_config()
  c.data.source, c.data.name, c.data.num_clients = "embedded", "digits", 6
  c.data.partition, c.data.alpha = "dirichlet", 0.5
  c.clients_per_round, c.model.name, c.local.steps, c.rounds = 2, "linear", 2, 3
  c.eval.last_n = 1
  c.analysis.update(analysis)
  return c


def test_analysis_off_runs_and_traces_nothing(monkeypatch):
  from fedjax_sharp.analysis import hessian
  from fedjax_sharp.training import loop

  def forbidden(*args, **kwargs):
    raise AssertionError("analysis code ran with analysis off")
  for module, name in ((hessian, "top_eigenvalues"), (hessian, "cross_entropy_batches"),
                       (sharpness, "hutchinson_trace"), (sharpness, "sam_sharpness"),
                       (sharpness, "cross_entropy_loss"), (clients, "per_class_accuracy")):
    monkeypatch.setattr(module, name, forbidden)
  # Metrics listed but every = 0, and every > 0 with no metrics: both off.
  for kw in ({"every": 0, "metrics": ("hessian_trace",)}, {"every": 1, "metrics": ()}):
    summary = loop.run(_tiny_run_config(**kw), None, progress=False)
    assert summary["status"] == "completed"


def test_analysis_during_training_is_logged(tmp_path):
  import json
  from fedjax_sharp.training import loop
  c = _tiny_run_config(every=2, metrics=("lambda_max", "hessian_trace", "sam_sharpness",
                                         "client_percentiles"), examples=200, trace_probes=4,
                       iters=5)
  loop.run(c, str(tmp_path), progress=False)
  records = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  logged = [r["round"] for r in records if "hessian_trace" in r]
  assert logged == [1, 2]                 # every 2nd round and the last
  last = records[-1]
  assert last["lambda_max"] > 0 and np.isfinite(last["hessian_trace"])
  trace, _ = _softmax_regression_hutchinson(tmp_path, examples=200, probes=4)
  assert last["hessian_trace"] == pytest.approx(trace, rel=1e-4)   # the final model's
  # 5 power iterations: a Rayleigh quotient, at most the top eigenvalue (a factor 2 exceeds it).
  assert last["lambda_max"] <= _softmax_regression_top_eigenvalue(tmp_path, 200) * (1 + 1e-5)
  assert last["client_acc_p10"] <= last["client_acc_p50"] <= last["client_acc_p90"]
  assert last["client_acc_worst"] <= last["client_acc_p10"]
  assert "participation_gap" in last
  from fedjax_sharp.training import config as config_lib
  bad = _tiny_run_config(every=1, metrics=("lambda_max", "flatness"))
  with pytest.raises(ValueError, match="analysis.metrics"):
    config_lib.validate(bad)


def test_global_vs_local_columns_are_the_right_model_on_the_right_data():
  """With a hand-made 'local training' (a fixed rescaling per client), each column equals the
  top eigenvalue of that model on those examples, computed directly."""
  from fedjax_sharp.analysis import global_local
  from fedjax_sharp.analysis import hessian as hessian_lib
  params, apply_fn, x, y = _model()
  loss_fn = sharpness.cross_entropy_loss(apply_fn)
  batches_of = lambda idx: cross_entropy_batches(x[idx], y[idx], 16)
  clients = [np.arange(0, 20), np.arange(20, 35)]
  local_train = lambda p, m: jax.tree.map(lambda v: v * (1.5 + m), p)
  sample = np.arange(0, len(y), 2)
  out = global_local.global_vs_local(loss_fn, params, batches_of, clients, local_train, [0, 1],
                                     sample, iters=200)
  top = lambda p, idx: float(hessian_lib.top_eigenvalues(loss_fn, p, batches_of(idx), k=1,
                                                         iters=200)[0])
  assert out["global_on_global"] == pytest.approx(top(params, sample), rel=1e-4)
  for m in (0, 1):
    assert out["global_on_client"][m] == pytest.approx(top(params, clients[m]), rel=1e-4)
    local = local_train(params, m)
    assert out["local_on_client"][m] == pytest.approx(top(local, clients[m]), rel=1e-4)
    assert out["local_on_global"][m] == pytest.approx(top(local, sample), rel=1e-4)
  assert out["local_on_global_max"] == max(out["local_on_global"])
  assert "local_on_global" not in global_local.global_vs_local(
      loss_fn, params, batches_of, clients, local_train, [0], sample, iters=2,
      local_on_global=False)


def test_global_vs_local_sharpness_of_a_finished_run(tmp_path):
  from fedjax_sharp.analysis import hessian as hessian_lib
  from fedjax_sharp.training import loop, run_analysis
  c = _tiny_run_config()
  loop.run(c, str(tmp_path), progress=False)
  out = run_analysis.run_global_local(str(tmp_path), clients=2, iters=5, global_examples=300)
  assert out["clients"] == [0, 1] and len(out["local_on_client"]) == 2
  exp = loop.build_experiment(c)
  params = loop.load_params(str(tmp_path / loop.FINAL_PARAMS), exp.init_params)
  idx = np.asarray(exp.client_indices[1])
  direct = hessian_lib.top_eigenvalues(
      sharpness.cross_entropy_loss(exp.apply_fn), params,
      hessian_lib.cross_entropy_batches(exp.dataset.x_train[idx], exp.dataset.y_train[idx],
                                        c.eval.batch_size, exp.eval_preprocess), k=1, iters=5)
  assert out["global_on_client"][1] == pytest.approx(direct[0], rel=1e-4)
  # The local models really trained (their curvature on the client's loss differs).
  assert out["local_on_client"] != out["global_on_client"]
  assert out["global_on_global"] > 0
  # FedGloSS Table 1's lambda_{1,g} (the local models on the global sample) is stored too.
  assert len(out["local_on_global"]) == 2
  assert out["local_on_global_mean"] == pytest.approx(np.mean(out["local_on_global"]))
  assert out["local_on_global"] != out["local_on_client"]
  # Per-client percentiles of the saved model: the reweighted accuracies computed by hand here,
  # 'trained' = the clients the run's sampler drew in its 3 rounds.
  got = run_analysis.run_clients(str(tmp_path), experiment=exp)
  ds = exp.dataset
  pred = np.argmax(np.asarray(exp.apply_fn(params, exp.eval_preprocess(ds.x_test, None))), -1)
  per_class = np.array([np.mean(pred[ds.y_test == k] == k) for k in range(ds.num_classes)])
  acc = []
  for ix in exp.client_indices:
    freq = np.bincount(ds.y_train[np.asarray(ix)], minlength=ds.num_classes) / len(ix)
    acc.append(float(freq @ per_class))
  sampled = sorted({int(i) for t in range(c.rounds) for i in exp.sampler.sample_clients(t)})
  assert got["client_acc_worst"] == pytest.approx(min(acc), rel=1e-6)
  assert got["client_acc_p50"] == pytest.approx(float(np.median(acc)), rel=1e-6)
  assert got["trained_acc"] == pytest.approx(np.mean([acc[i] for i in sampled]), rel=1e-6)
  import json
  assert json.load(open(tmp_path / "analysis.json"))["final_clients"] == got
