"""Builds the three notebooks from the cells below and executes them (outputs committed).

    python notebooks/build_notebooks.py            # write + execute all three (a few minutes)
    python notebooks/build_notebooks.py --no-run   # write only

CI runs the committed notebooks with FEDJAX_SHARP_NOTEBOOK_TINY=1 (tests/test_notebooks.py),
which shrinks rounds and data so that all three take well under five minutes.
"""
from __future__ import annotations

import argparse
import os

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

SETUP = '''import os
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt
# CI executes every notebook with FEDJAX_SHARP_NOTEBOOK_TINY=1: fewer rounds, less data.
TINY = os.environ.get("FEDJAX_SHARP_NOTEBOOK_TINY") == "1"
FMNIST = os.path.isdir("/usr/share/datasets/fashion-mnist")   # Debian's dataset-fashion-mnist
print("jax", jax.__version__, "on", jax.default_backend(), "| tiny:", TINY, "| Fashion-MNIST:", FMNIST)'''

QUICKSTART = [
    ("md", """# fedjax_sharp quickstart

A config built in code, a heterogeneous partition, and FedAvg, FedGMT and FedGloSS built from the
library's pure functions and run by calling the round engine directly (no command line). Then
the same FedAvg with a SAM client optimiser (FedSAM), accuracy curves, and the sharpness
(top Hessian eigenvalue) of each final model."""),
    ("code", SETUP),
    ("md", "## Data and partition\nFashion-MNIST when Debian's package is installed, else the embedded digits; a long-tail Dirichlet(0.1) split as in the FedGMT paper."),
    ("code", '''from fedjax_sharp import data
from fedjax_sharp.training.config import base_config

config = base_config()
if FMNIST:
    config.data.source, config.data.name = "idx", "fashion_mnist"
    config.data.max_train_examples = 3000 if TINY else 12000   # a class-stratified subset
    config.data.max_test_examples = 1000 if TINY else 5000
else:
    config.data.source, config.data.name = "embedded", "digits"
config.data.num_clients, config.data.partition, config.data.alpha = 20, "dirichlet", 0.1
config.data.long_tail = True
dataset = data.load_dataset(config.data)
clients = data.partition_dataset(dataset, config.data, seed=0)
print(dataset)
print(data.format_histograms(data.label_histograms(dataset.y_train, clients, dataset.num_classes), max_rows=8))'''),
    ("md", "## Model, engine and a training function\nThe engine runs a whole round (all sampled clients, aggregation, server update) as one jitted function; here clients are vmapped."),
    ("code", '''from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo, TrainData
from fedjax_sharp.models import get_model, init_params
from fedjax_sharp.training.loop import make_evaluator, make_preprocess

model = get_model("mlp", dataset.num_classes)
params0 = init_params(model, jax.random.key(0), dataset.input_shape)
apply_fn = lambda p, x: model.apply({"params": p}, x)
preprocess = make_preprocess(dataset, "none", True)          # normalisation only
evaluate = make_evaluator(apply_fn, dataset.x_test, dataset.y_test, preprocess, 1000)
train_data = TrainData(jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train))
ROUNDS = 3 if TINY else 40

def train(algorithm, rounds=ROUNDS, seed=0):
    engine = RoundEngine(algorithm, len(clients), ExecutionConfig("vmap", local_loop="rolled"),
                         preprocess=preprocess)
    sampler = CohortSampler(clients, clients_per_round=5, batch_size=32, local_epochs=1,
                            seed=seed, weighting="uniform")
    server, table = engine.init(params0)
    accuracy = []
    for t in range(rounds):
        info = RoundInfo(jnp.int32(t), jnp.float32(0.05 * 0.998 ** t), len(clients))
        server, table, metrics = engine.round(server, table, train_data, sampler.build(t), info,
                                              jax.random.key(seed))
        accuracy.append(evaluate(algorithm.eval_params(server))["test_accuracy"])
    return algorithm.eval_params(server), np.array(accuracy)'''),
    ("md", "## FedAvg, FedGMT, FedGloSS, and FedSAM by swapping the client optimiser"),
    ("code", '''from fedjax_sharp.algorithms import fed_avg, local_sgd
from fedjax_sharp.algorithms.fed_gloss import fed_gloss
from fedjax_sharp.algorithms.fed_gmt import fed_gmt
from fedjax_sharp.core.optimizers import ClientOptimizer

sgd = local_sgd(momentum=0.9, weight_decay=1e-5)
algorithms = {
    "FedAvg": fed_avg(apply_fn, sgd),
    "FedGMT": fed_gmt(apply_fn, sgd),                      # paper defaults: gamma 1, tau 3, alpha 0.95
    "FedGloSS": fed_gloss(apply_fn, sgd),                  # server-side SAM + ADMM
    "FedSAM": fed_avg(apply_fn, ClientOptimizer(sgd, "sam", rho=0.05)),   # FedAvg + a SAM client
}
results = {name: train(alg) for name, alg in algorithms.items()}
for name, (_, acc) in results.items():
    print(f"{name:9s} final accuracy {acc[-1]:.3f}, mean of the last 5 rounds {acc[-5:].mean():.3f}")'''),
    ("code", '''fig, ax = plt.subplots(figsize=(7, 4))
for name, (_, acc) in results.items():
    ax.plot(np.arange(1, len(acc) + 1), acc, label=name)
ax.set_xlabel("round"); ax.set_ylabel("test accuracy"); ax.grid(alpha=0.3); ax.legend()
ax.set_title(f"{dataset.name}, 20 clients, long-tail Dirichlet(0.1), 5 per round")
plt.show()'''),
    ("md", "## Sharpness of the final models\nThe top Hessian eigenvalue of the test loss (power iteration, FedGloSS's protocol with fewer iterations here)."),
    ("code", '''from fedjax_sharp.analysis import hessian
for name, (params, _) in results.items():
    lam = hessian.model_top_eigenvalues(apply_fn, params, dataset.x_test, dataset.y_test, k=1,
                                        iters=5 if TINY else 20, preprocess=preprocess,
                                        max_examples=500 if TINY else 2000)
    print(f"{name:9s} lambda_max = {lam[0]:.3f}")'''),
]

WRITE_YOUR_ALGORITHM = [
    ("md", """# Write your own algorithm

FedProx written from scratch as a `FederatedAlgorithm` of pure functions, registered under a new
name, run next to the library's built-in `fedprox`, and checked to compute the same rounds."""),
    ("code", SETUP),
    ("code", '''import flax.struct, optax
from fedjax_sharp.core import tree, losses
from fedjax_sharp.core.algorithm import Communication, FederatedAlgorithm
from fedjax_sharp.core.optimizers import local_sgd, with_learning_rate

@flax.struct.dataclass
class Local:
    params: object       # the client's iterate w
    opt_state: object    # its optimiser state (momentum: reset every round)
    anchor: object       # w^t, the prox centre

def my_fedprox(apply_fn, tx, mu=0.01):
    # tx: optax, with an injected learning rate (local_sgd(momentum, weight_decay))

    def loss_fn(params, batch):
        logits = apply_fn(params, batch["x"])
        return losses.masked_cross_entropy(logits, batch["y"], batch["mask"]), logits

    def client_init(w_global, client_state, info, round_info):
        return Local(w_global, with_learning_rate(tx.init(w_global), round_info.learning_rate), w_global)

    def local_step(state, batch, key, round_info):
        (loss, logits), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
        g = jax.tree.map(lambda gi, w, w0: gi + mu * (w - w0), g, state.params, state.anchor)
        updates, opt_state = tx.update(g, state.opt_state, state.params)
        n = jnp.sum(batch["mask"].astype(jnp.float32))
        metrics = {"loss_sum": loss * n, "examples": n, "steps": jnp.ones(()),
                   "correct": losses.correct_count(logits, batch["y"], batch["mask"])}
        return state.replace(params=optax.apply_updates(state.params, updates), opt_state=opt_state), metrics

    def client_finalize(local, w_global, client_state, info, round_info):
        return tree.sub(w_global, local.params), client_state       # upload w^t - w_m

    def server_update(w, uploads, weights, mask, round_info):
        return tree.sub(w, tree.weighted_sum(uploads, weights))     # FedAvg: w - sum p_m (w - w_m)

    return FederatedAlgorithm(
        name="my_fedprox", server_init=lambda p: p, client_state_init=lambda p: (),
        broadcast=lambda w, round_info: w, client_init=client_init, local_step=local_step,
        client_finalize=client_finalize, server_update=server_update, eval_params=lambda w: w,
        communication=Communication(down=1, up=1))'''),
    ("md", "Register it under a config name, without touching the package: the factory's keyword arguments are its hyperparameters (default, range, one-line doc), so `base_config()` now has `config.algorithm.my_fedprox.mu`, and `run.py`, `compare.py` and `loop.run` accept `--config.algorithm.name=my_fedprox --config.algorithm.my_fedprox.mu=0.1`. The registry passes the client optimiser built from `config.local` (momentum, weight decay)."),
    ("code", '''from typing import Annotated
from fedjax_sharp.algorithms import Field, register

@register("my_fedprox", title="My FedProx", paper="Li et al., MLSys 2020")
def my_fedprox_factory(apply_fn, client_optimizer, *,
                       mu: Annotated[float, Field(">= 0", "proximal weight")] = 0.01,
                       name: str = "my_fedprox"):
    return my_fedprox(apply_fn, client_optimizer.tx, mu=mu)'''),
    ("md", "## Run it next to the built-in FedProx\nThe same config, seed, cohorts and keys; only `algorithm.name` differs."),
    ("code", '''import tempfile
from fedjax_sharp.training import loop
from fedjax_sharp.training.config import base_config

def config_for(name):
    c = base_config()
    c.data.source, c.data.name, c.data.num_clients = "embedded", "digits", 20
    c.data.partition, c.data.alpha = "dirichlet", 0.3
    c.clients_per_round, c.model.name, c.local.batch_size = 5, "mlp", 16
    c.local.momentum = 0.9
    c.algorithm.name, c.algorithm[name].mu = name, 0.1
    c.rounds, c.eval.every, c.eval.last_n = (3 if TINY else 30), 1, 5
    c.engine.client_strategy, c.engine.local_loop = "vmap", "rolled"
    return c

runs = {}
for name in ("fedprox", "my_fedprox"):
    workdir = tempfile.mkdtemp()
    summary = loop.run(config_for(name), workdir, progress=False)
    exp = loop.build_experiment(config_for(name))
    params = loop.load_params(os.path.join(workdir, loop.FINAL_PARAMS), exp.init_params)
    records = [r for r in map(__import__("json").loads, open(os.path.join(workdir, "metrics.jsonl")))]
    runs[name] = (params, [r["test_accuracy"] for r in records])
    print(f"{name:11s} final accuracy {summary['final_test_accuracy']:.4f}")'''),
    ("md", "## The test: same model, same curve"),
    ("code", '''diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in
           zip(jax.tree.leaves(runs["fedprox"][0]), jax.tree.leaves(runs["my_fedprox"][0])))
print(f"largest parameter difference after all rounds: {diff:.2e}")
assert diff < 1e-4, diff
np.testing.assert_allclose(runs["fedprox"][1], runs["my_fedprox"][1], atol=2e-3)
fig, ax = plt.subplots(figsize=(6, 3.6))
for name, (_, acc) in runs.items():
    ax.plot(np.arange(1, len(acc) + 1), acc, label=name, linestyle="-" if name == "fedprox" else "--")
ax.set_xlabel("round"); ax.set_ylabel("test accuracy"); ax.grid(alpha=0.3); ax.legend()
ax.set_title("built-in FedProx vs the notebook's (curves coincide)")
plt.show()'''),
]

MINIMAX = [
    ("md", """# Federated minimax: FESS-GDA vs Local SGDA

The bilinear problem `f(x, y) = x y` with `y` in the box `[-1, 1]` (the spec's problem D, saddle
at (0, 0)): Local SGDA's simultaneous descent-ascent cycles around the saddle instead of
converging; FESS-GDA's smoothing (`p = 2`, `beta = 0.1`) converges. Then a few rounds of fair
classification over classes (min over the model, max over class weights in the simplex)."""),
    ("code", SETUP),
    ("code", '''from fedjax_sharp.core import CohortSampler, ExecutionConfig, RoundEngine, RoundInfo
from fedjax_sharp.minimax import algorithms as mm, tasks

task = tasks.bilinear()                      # 4 identical clients, x0 = 1, y0 = 0
ETA = 0.1                                    # local step sizes of both players, K = 1

def trajectory(algorithm, rounds):
    m = len(task.client_indices)
    engine = RoundEngine(algorithm, m, ExecutionConfig("vmap", local_loop="rolled"),
                         preprocess=task.preprocess)
    cohort = CohortSampler(task.client_indices, m, 1, local_steps=1, seed=0,
                           weighting="uniform").build(0)
    server, table = engine.init(task.init_params(jax.random.key(0)))
    xy = []
    for t in range(rounds):
        server, table, _ = engine.round(server, table, task.train_data, cohort,
                                        RoundInfo(jnp.int32(t), jnp.float32(0.0), m), jax.random.key(1))
        xy.append((float(server.params["x"][0]), float(server.params["y"][0])))
    return np.array(xy)

players = mm.PlayerOptimizers(lr_x=ETA, lr_y=ETA)
ROUNDS = 300 if TINY else 1500
paths = {
    "Local SGDA": trajectory(mm.minimax_algorithm(task, players, rule="local_sgda", name="local_sgda"), ROUNDS),
    "FESS-GDA (p=2, beta=0.1)": trajectory(mm.minimax_algorithm(task, players, rule="fess_gda", p=2.0,
                                                                beta=0.1), ROUNDS),
}
for name, xy in paths.items():
    print(f"{name:26s} |x| over the last 100 rounds: max {np.abs(xy[-100:, 0]).max():.2e}")'''),
    ("code", '''fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
for name, xy in paths.items():
    ax1.plot(xy[:, 0], xy[:, 1], label=name, linewidth=0.8)
    ax2.semilogy(np.arange(1, len(xy) + 1), np.abs(xy[:, 0]) + 1e-12, label=name)
ax1.plot([0], [0], "k*", markersize=10, label="saddle (0, 0)")
ax1.set_xlabel("x (min player)"); ax1.set_ylabel("y (max player, box [-1, 1])")
ax1.set_title("trajectories"); ax1.legend(fontsize=8); ax1.grid(alpha=0.3)
ax2.set_xlabel("round"); ax2.set_ylabel("|x - x*|"); ax2.set_title("distance to the saddle in x")
ax2.legend(fontsize=8); ax2.grid(alpha=0.3)
plt.tight_layout(); plt.show()'''),
    ("md", "## Fair classification over classes\n`min_x max_{y in simplex} sum_c y_c L_c(x) - (lambda/2)||y||^2`: the class weights `y` move towards the classes with the highest loss; the metric is the worst-class test accuracy."),
    ("code", '''from fedjax_sharp.training import loop
from fedjax_sharp.training.config import base_config

c = base_config()
c.task.name = "fair_classification"
if FMNIST:
    c.data.source, c.data.name = "idx", "fashion_mnist"
    c.data.max_train_examples, c.data.max_test_examples = (2000, 1000) if TINY else (12000, 5000)
else:
    c.data.source, c.data.name = "embedded", "digits"
c.data.num_clients = c.clients_per_round = 10
c.data.partition, c.data.alpha = "dirichlet", 0.1
c.aggregation, c.model.name = "examples", "mlp"
c.local.steps, c.local.batch_size = 5, 32
c.minimax.update(lr_x=0.05, lr_y=0.01)
c.rounds, c.eval.every, c.eval.last_n = (3 if TINY else 40), 1, 5
c.engine.client_strategy, c.engine.local_loop = "vmap", "rolled"
curves = {}
for name in ("local_sgda", "fess_gda"):
    c.algorithm.name = name
    c.algorithm.fess_gda.update(p=0.1, beta=0.1)
    workdir = __import__("tempfile").mkdtemp()
    loop.run(c, workdir, progress=False)
    records = [__import__("json").loads(l) for l in open(os.path.join(workdir, "metrics.jsonl"))]
    curves[name] = records
    last = records[-1]
    print(f"{name:10s} worst-class {last['worst_class_accuracy']:.3f}, mean {last['test_accuracy']:.3f}, "
          f"largest class weight y = {max(last['y']):.2f} (class {int(np.argmax(last['y']))})")'''),
    ("code", '''fig, ax = plt.subplots(figsize=(7, 3.8))
for name, records in curves.items():
    ax.plot([r["round"] + 1 for r in records], [r["worst_class_accuracy"] for r in records],
            label=f"{name}: worst class")
    ax.plot([r["round"] + 1 for r in records], [r["test_accuracy"] for r in records], linestyle=":",
            label=f"{name}: mean")
ax.set_xlabel("round"); ax.set_ylabel("test accuracy"); ax.grid(alpha=0.3); ax.legend(fontsize=8)
ax.set_title("fair classification over classes")
plt.show()'''),
]


def make(cells):
  nb = nbformat.v4.new_notebook()
  nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                               "language": "python"}
  for kind, src in cells:
    nb.cells.append(nbformat.v4.new_markdown_cell(src) if kind == "md"
                    else nbformat.v4.new_code_cell(src))
  return nb


NOTEBOOKS = {"quickstart.ipynb": QUICKSTART,
             "write_your_algorithm.ipynb": WRITE_YOUR_ALGORITHM,
             "minimax.ipynb": MINIMAX}


def execute(nb, cwd, timeout=1200):
  NotebookClient(nb, timeout=timeout, kernel_name="python3",
                 resources={"metadata": {"path": cwd}}).execute()
  return nb


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--no-run", action="store_true")
  parser.add_argument("--only", default="")
  args = parser.parse_args()
  for name, cells in NOTEBOOKS.items():
    if args.only and args.only not in name:
      continue
    nb = make(cells)
    if not args.no_run:
      execute(nb, ROOT)
    nbformat.write(nb, os.path.join(HERE, name))
    print("wrote", name)


if __name__ == "__main__":
  main()
