"""Minimax tasks on data: fair classification's population identity, the GAN and its Frechet
distance, and the minimax path through the standard CLI (run.py / compare.py)."""
from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sharp.data.types import ArrayDataset
from fedjax_sharp.minimax import fair, gan
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.training import compare, config as config_lib, loop

import cli_runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dataset(n=120, n_test=60, classes=4, shape=(8, 8, 1), seed=0):
  rng = np.random.default_rng(seed)
  y = rng.integers(0, classes, n).astype(np.int32)
  return ArrayDataset("toy", rng.integers(0, 256, (n, *shape), dtype=np.uint8), y,
                      rng.integers(0, 256, (n_test, *shape), dtype=np.uint8),
                      rng.integers(0, classes, n_test).astype(np.int32), classes,
                      (0.5,), (0.25,))


def test_fair_client_objectives_aggregate_to_the_population_objective():
  """sum_i (n_i/n) f_i(x, y) = sum_c y_c L_c(x) - lam/2 ||y||^2 with clients that miss classes."""
  data = _dataset()
  labels = data.y_train
  # Skewed clients: client 0 has no class-3 example, client 2 only classes 0-1.
  order = np.argsort(labels, kind="stable")
  parts = [order[:30], order[30:75], order[75:]]
  model = get_model("linear", data.num_classes)
  params = init_params(model, jax.random.key(0), data.x_train.shape[1:])
  apply_fn = lambda p, x: model.apply({"params": p}, x)
  lam = 0.3
  task = fair.fair_classification(data, parts, apply_fn, params, lam=lam)
  y = jnp.asarray([0.1, 0.4, 0.2, 0.3])
  full = {"x": params, "y": y}
  x = task.preprocess(jnp.asarray(data.x_train), None)
  n = len(labels)
  total = 0.0
  for part in parts:
    batch = {"x": x[part], "y": jnp.asarray(labels[part]), "mask": jnp.ones(len(part), bool)}
    _, value = task.gradients(full, batch, None)
    total += len(part) / n * float(value)
  population = float(fair.population_objective(apply_fn, full, x, jnp.asarray(labels),
                                               data.num_classes, lam))
  np.testing.assert_allclose(total, population, rtol=1e-5)
  # The class-weight gradient is the per-class population loss minus lam y.
  grads, _ = task.gradients(full, {"x": x, "y": jnp.asarray(labels),
                                   "mask": jnp.ones(n, bool)}, None)
  ce = np.asarray(jax.vmap(lambda xi, yi: -jax.nn.log_softmax(apply_fn(params, xi[None]))[0, yi])(
      x, jnp.asarray(labels)))
  per_class = np.array([ce[labels == c].mean() for c in range(4)])
  np.testing.assert_allclose(grads["y"], per_class - lam * np.asarray(y), rtol=1e-4)
  metrics = task.evaluate(full)
  assert 0 <= metrics["worst_class_accuracy"] <= metrics["test_accuracy"] <= 1
  assert len(metrics["y"]) == 4


def test_frechet_distance_closed_forms():
  rng = np.random.default_rng(0)
  a = rng.normal(size=(5, 5))
  cov = a @ a.T + np.eye(5)
  assert abs(gan.frechet_distance(np.ones(5), cov, np.ones(5), cov)) < 1e-8
  s1, s2 = np.array([1.0, 4.0, 0.25]), np.array([4.0, 1.0, 1.0])
  mu1, mu2 = np.zeros(3), np.array([1.0, 2.0, 0.0])
  expected = 5.0 + np.sum((np.sqrt(s1) - np.sqrt(s2)) ** 2)
  np.testing.assert_allclose(gan.frechet_distance(mu1, np.diag(s1), mu2, np.diag(s2)), expected,
                             rtol=1e-10)


def test_gan_task_trains_through_the_loop_and_saves_grids(tmp_path):
  c = config_lib.load_config_file(os.path.join(ROOT, "configs", "minimax_gan_fmnist.py"))
  c.data.source, c.data.name = "embedded", "digits"      # 8x8 images: a small, fast stand-in
  c.data.num_clients, c.clients_per_round = 4, 2
  c.local.steps, c.local.batch_size = 2, 16
  c.rounds, c.eval.every, c.eval.artifact_every, c.checkpoint_every = 2, 1, 1, 0
  c.task.gan.update(fd_samples=64, classifier_epochs=1,
                    classifier_cache=str(tmp_path / "clf.msgpack"))
  with pytest.raises(ValueError, match="28x28"):
    loop.build_experiment(c)   # the DCGAN is for 28x28 images
  gan_28 = _dataset(n=96, n_test=64, classes=3, shape=(28, 28, 1))
  task = gan.gan_task(gan_28, [np.arange(0, 48), np.arange(48, 96)],
                      cache_path=str(tmp_path / "clf.msgpack"), fd_samples=64,
                      classifier_epochs=1)
  assert os.path.exists(tmp_path / "clf.msgpack")
  from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo
  from fedjax_sharp.minimax import algorithms as mm
  alg = mm.minimax_algorithm(task, mm.PlayerOptimizers(2e-4, 2e-4), rule="fess_gda", p=1.0)
  engine = RoundEngine(alg, 2, ExecutionConfig("host", local_loop="unrolled"),
                       preprocess=task.preprocess)
  server, table = engine.init(task.init_params(jax.random.key(0)))
  sampler = CohortSampler(task.client_indices, 2, 16, local_steps=2, seed=0)
  fd0 = task.evaluate(server.params)["frechet_distance"]
  for t in range(2):
    server, table, metrics = engine.round(server, table, task.train_data, sampler.build(t),
                                          RoundInfo(jnp.int32(t), jnp.float32(0.0), 2),
                                          jax.random.key(t))
  assert np.isfinite(float(metrics["loss_sum"]))
  fd = task.evaluate(server.params)["frechet_distance"]
  assert np.isfinite(fd) and fd != fd0
  task.artifacts(server.params, str(tmp_path), "test")
  assert (tmp_path / "samples_test.png").stat().st_size > 500
  # The generator's gradient is the non-saturating loss's; the discriminator ascends f_D.
  grads, value = task.gradients(server.params, {"x": task.preprocess(
      jnp.asarray(gan_28.x_train[:8]), None), "mask": jnp.ones(8, bool)}, jax.random.key(3))
  assert float(value) < 0 and all(np.isfinite(np.asarray(g)).all()
                                  for g in jax.tree.leaves(grads))


def test_minimax_toy_through_run_py_and_compare(tmp_path):
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "run.py"),
         f"--config={os.path.join(ROOT, 'configs', 'minimax_toy.py')}:simplex",
         f"--workdir={tmp_path / 'run'}", "--config.rounds=30"]
  out = cli_runner.run(cmd, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "final distance to saddle" in out.stdout
  summary = json.load(open(tmp_path / "run" / "summary.json"))
  assert summary["metric"] == "distance_to_saddle" and summary["higher_is_better"] is False
  record = json.loads(open(tmp_path / "run" / "metrics.jsonl").readline())
  toy = config_lib.load_config_file(os.path.join(ROOT, "configs", "minimax_toy.py"), "simplex")
  assert "lr" not in record and (record["lr_x"], record["lr_y"]) == (
      toy.minimax.lr_x, toy.minimax.lr_y)   # the players' rates, not local.lr's schedule
  config = config_lib.load_config_file(os.path.join(ROOT, "configs", "minimax_toy.py"), "bilinear")
  config.rounds = 40
  results = compare.run_grid(config, ["local_sgda", "fess_gda"], [0], str(tmp_path / "cmp"),
                             progress=False)
  rows = compare.table_rows(results, 10, 0.0)
  assert rows[0]["metric"] == "abs_x"
  assert "abs_x last 10" in compare.to_markdown(rows, 10, 0.0)
  compare.plot_accuracy(results, str(tmp_path / "p.png"))
  with pytest.raises(ValueError, match="algorithm.name='fedavg' is not one of"):
    config.algorithm.name = "fedavg"
    config_lib.validate(config)
