"""Configs, the training loop, metric files and the comparison tables."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from algo_helpers import override

from fedjax_sharp.training import compare, config as config_lib, loop, metrics as metrics_lib


def tiny_config(**overrides):
  c = config_lib.base_config()
  c.name = "tiny"
  c.data.source = "embedded"
  c.data.name = "digits"
  c.data.num_clients = 6
  c.data.partition = "iid"
  c.clients_per_round = 3
  c.model.name = "linear"
  c.local.steps = 2
  c.local.batch_size = 16
  c.local.lr = 0.1
  c.rounds = 3
  c.eval.last_n = 2
  c.engine.client_strategy = "vmap"
  c.engine.local_loop = "rolled"
  return override(c, **overrides)


@pytest.mark.parametrize("override,field", [
    ({"algorithm.name": "fedfoo"}, "algorithm.name"),
    ({"data.alpha": -0.5}, "data.alpha"),
    ({"local.batch_size": 0}, "local.batch_size"),
    ({"model.name": "resnet1000"}, "model.name"),
    ({"clients_per_round": 7}, "clients_per_round"),
    ({"engine.client_strategy": "pmap"}, "engine.client_strategy"),
    ({"aggregation": "median"}, "aggregation"),
    ({"local.lr_decay": 1.5}, "local.lr_decay"),
    ({"data.augment": "mixup"}, "data.augment"),
    ({"rounds": 0}, "rounds"),
    ({"data.validation_examples": -5}, "data.validation_examples"),
    ({"engine.devices": -1}, "engine.devices"),
    ({"engine.experiment_devices": 0}, "engine.experiment_devices"),
    ({"engine.client_table": "tape"}, "engine.client_table"),
    ({"engine.micro_batch": -1}, "engine.micro_batch"),
])
def test_bad_config_names_the_field(override, field):
  with pytest.raises(ValueError, match=field.replace(".", r"\.")):
    config_lib.validate(tiny_config(**override))


def test_micro_batch_is_refused_for_minimax_tasks():
  c = config_lib.load_config_file(os.path.join(CONFIG_DIR, "minimax_fair_fmnist.py"))
  config_lib.validate(c)
  c.engine.micro_batch = 16
  with pytest.raises(ValueError, match=r"engine\.micro_batch applies to classification only"):
    config_lib.validate(c)


def test_more_clients_than_examples_is_rejected():
  c = tiny_config(**{"data.num_clients": 5000, "clients_per_round": 3})
  with pytest.raises(ValueError, match=r"data\.num_clients"):
    loop.build_experiment(c)


def test_unknown_data_source_is_rejected():
  with pytest.raises(ValueError, match=r"data\.source"):
    loop.build_experiment(tiny_config(**{"data.source": "ftp"}))


def test_run_writes_config_metrics_and_summary(tmp_path):
  c = tiny_config()
  summary = loop.run(c, str(tmp_path), progress=False)
  assert json.loads((tmp_path / "config.json").read_text())["algorithm"]["name"] == "fedavg"
  records = metrics_lib.read_jsonl(str(tmp_path / "metrics.jsonl"))
  assert [r["round"] for r in records] == [0, 1, 2]
  for key in ("train_loss", "test_loss", "test_accuracy", "wall_time_s", "bytes_total", "lr"):
    assert all(r[key] is not None for r in records), key
  # 3 clients x (1 down + 1 up) x model bytes per round (linear 64x10 + 10 floats).
  model_bytes = (64 * 10 + 10) * 4
  assert [r["bytes_total"] for r in records] == [6 * model_bytes * (t + 1) for t in range(3)]
  np.testing.assert_allclose([r["lr"] for r in records], [0.1 * 0.998 ** t for t in range(3)])
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  accs = [r["test_accuracy"] for r in records]
  assert on_disk["mean_test_accuracy_last_2"] == pytest.approx(np.mean(accs[-2:]))
  assert summary["traces"] == 1
  assert summary["final_test_accuracy"] == pytest.approx(accs[-1])
  assert accs[-1] > 0.3  # digits are learnable: 10% would mean nothing trained


def test_runs_are_reproducible_per_seed(tmp_path):
  a = loop.run(tiny_config(), None, progress=False)
  b = loop.run(tiny_config(), None, progress=False)
  c = loop.run(tiny_config(seed=1), None, progress=False)
  assert a["final_test_accuracy"] == b["final_test_accuracy"]
  assert a["final_test_accuracy"] != c["final_test_accuracy"]
  assert a["eval_split"] == "test"


def test_validation_examples_evaluate_on_the_held_out_split():
  # The digits' training set minus 300 held-out examples; the metrics come from those 300.
  held = loop.build_experiment(tiny_config(data__validation_examples=300))
  assert held.dataset.num_test == 300 and held.dataset.num_train == 1438 - 300
  summary = loop.run(tiny_config(data__validation_examples=300, rounds=1), None, progress=False)
  assert summary["eval_split"] == "validation"
  assert round(summary["final_test_accuracy"] * 300) == pytest.approx(
      summary["final_test_accuracy"] * 300, abs=1e-6)


def test_resume_from_checkpoint_equals_an_uninterrupted_run(tmp_path):
  straight = tmp_path / "straight"
  loop.run(tiny_config(rounds=4, algorithm__name="fedgmt"), str(straight), progress=False)
  resumed = tmp_path / "resumed"
  loop.run(tiny_config(rounds=2, checkpoint_every=1, algorithm__name="fedgmt"), str(resumed),
           progress=False)
  # A crash after round 2 left a half-written line for round 2 behind: it must be dropped.
  with open(resumed / "metrics.jsonl", "a") as f:
    f.write(json.dumps({"round": 2, "test_accuracy": 0.0}) + "\n")
  loop.run(tiny_config(rounds=4, checkpoint_every=1, algorithm__name="fedgmt"), str(resumed),
           progress=False)
  a = metrics_lib.read_jsonl(str(straight / "metrics.jsonl"))
  b = metrics_lib.read_jsonl(str(resumed / "metrics.jsonl"))
  assert [r["round"] for r in b] == [0, 1, 2, 3]
  for key in ("train_loss", "test_loss", "test_accuracy", "bytes_total"):
    assert [r[key] for r in a] == [r[key] for r in b], key
  # Identical test losses in every round already imply identical models; the checkpoint
  # itself points past the last round.
  from fedjax_sharp.training import checkpoints
  exp = loop.build_experiment(tiny_config(rounds=4, algorithm__name="fedgmt"))
  next_round, *_ = checkpoints.restore(str(resumed), exp.config,
                                       *exp.engine.init(exp.init_params))
  assert next_round == 4


def test_metrics_lines_are_durable_before_close(tmp_path):
  path = str(tmp_path / "m.jsonl")
  writer = metrics_lib.JsonlWriter(path)
  writer.write({"round": 0, "x": np.float32(1.5)})
  assert metrics_lib.read_jsonl(path) == [{"round": 0, "x": 1.5}]
  writer.close()


def test_summarize_last_n_and_rounds_to_target():
  recs = [{"round": t, "test_accuracy": a, "bytes_total": 10 * (t + 1), "wall_time_s": t}
          for t, a in enumerate([0.1, 0.5, None, 0.7, 0.9])]
  s = metrics_lib.summarize(recs, last_n=2, target=0.6)
  assert s["mean_test_accuracy_last_2"] == pytest.approx(0.8)
  assert s["std_test_accuracy_last_2"] == pytest.approx(0.1)
  assert s["rounds_to_target"] == 4
  assert s["final_test_accuracy"] == 0.9


def test_readers_fill_what_older_summaries_and_unevaluated_rounds_leave_out(tmp_path):
  # An unevaluated round writes None; a metric on its own schedule is absent: both unmeasured.
  recs = [{"round": 0, "test_accuracy": None}, {"round": 1, "test_accuracy": 0.5,
                                                 "lambda_max": 2.0}]
  assert metrics_lib.evaluated(recs, "test_accuracy") == recs[1:]
  assert metrics_lib.evaluated(recs, "lambda_max") == recs[1:]
  assert metrics_lib.measured(recs[0], "lambda_max") is None
  # A summary of a version before metric, higher_is_better and status.
  (tmp_path / "summary.json").write_text(json.dumps({"rounds": 3, "seed": 1}))
  summary = metrics_lib.read_summary(str(tmp_path / "summary.json"))
  assert summary == {"rounds": 3, "seed": 1, "metric": "test_accuracy",
                     "higher_is_better": True, "status": "completed"}
  run = compare.normalise_run({"records": recs, "summary": {"rounds": 3}})
  assert (run["hessian"], run["analysis"], run["run_dir"], run["reused"]) == (
      None, None, None, False)
  assert run["summary"]["seed"] is None and "dp_epsilon" not in run["summary"]


def test_compare_grid_writes_table_csv_and_plot(tmp_path):
  c = tiny_config(**{"eval.target_accuracy": 0.2})
  results = compare.run_grid(c, ["fedavg"], [0, 1], str(tmp_path), progress=False)
  md = compare.write_reports(results, str(tmp_path), last_n=2, target=0.2)
  assert "| fedavg | 2 |" in md
  assert (tmp_path / "accuracy.png").stat().st_size > 1000
  rows = (tmp_path / "results.csv").read_text().splitlines()
  assert rows[0].startswith("algorithm,seeds,metric,acc_last_n_mean")
  assert len(rows) == 2
  assert os.path.exists(tmp_path / "fedavg" / "seed_1" / "metrics.jsonl")


def test_algorithm_variants_parse_and_override_their_block():
  assert compare.parse_algorithms("fedavg, fedgmt[admm=False,gamma=0],feddyn[prox=none]") == [
      "fedavg", "fedgmt[admm=False,gamma=0]", "feddyn[prox=none]"]
  cfg = compare.configure_variant(tiny_config(), "fedgmt[admm=False,gamma=0]", seed=3)
  assert cfg.algorithm.name == "fedgmt" and cfg.seed == 3
  assert cfg.algorithm.fedgmt.admm is False and cfg.algorithm.fedgmt.gamma == 0.0
  assert cfg.algorithm.fedgmt.tau == 3.0  # untouched
  assert compare.configure_variant(tiny_config(), "feddyn[prox=none]", 0).algorithm.feddyn.prox \
      == "none"
  with pytest.raises(ValueError, match=r"config\.algorithm\.fedgmt\.gama does not exist"):
    compare.configure_variant(tiny_config(), "fedgmt[gama=0]", 0)
  with pytest.raises(ValueError, match="key=value"):
    compare.configure_variant(tiny_config(), "fedgmt[admm]", 0)
  # Dotted keys override any config path; bare keys the algorithm's block.
  cfg = compare.configure_variant(tiny_config(), "scaffold[local.lr=0.3,local.momentum=0.5,"
                                                 "momentum=0.2]", 0)
  assert cfg.local.lr == 0.3 and cfg.local.momentum == 0.5
  assert cfg.algorithm.scaffold.momentum == 0.2
  with pytest.raises(ValueError, match=r"config\.local\.nope does not exist"):
    compare.configure_variant(tiny_config(), "fedavg[local.nope=1]", 0)
  with pytest.raises(ValueError, match="config has no field 'lokal.lr'"):
    compare.configure_variant(tiny_config(), "fedavg[lokal.lr=1]", 0)


def test_reuse_reads_finished_runs_and_refuses_another_setting(tmp_path, monkeypatch):
  config = tiny_config()
  first = compare.run_grid(config, ["fedavg"], [0], str(tmp_path), progress=False)
  calls = []
  real_run = loop.run
  monkeypatch.setattr(loop, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
  again = compare.run_grid(config, ["fedavg", "fedprox"], [0], str(tmp_path), progress=False,
                           reuse=True)
  assert len(calls) == 1 and calls[0][0].algorithm.name == "fedprox"   # fedavg was read back
  assert again["fedavg"][0]["records"] == first["fedavg"][0]["records"]
  # report_only starts nothing: the finished runs only, the missing (algorithm, seed) left out.
  calls.clear()
  partial = compare.run_grid(config, ["fedavg", "fedprox", "fedsam"], [0, 1], str(tmp_path),
                             progress=False, report_only=True)
  assert calls == [] and {k: len(v) for k, v in partial.items()} == {"fedavg": 1, "fedprox": 1}
  with pytest.raises(ValueError, match="no finished run"):
    compare.run_grid(config, ["fedsam"], [0], str(tmp_path), progress=False, report_only=True)
  other = tiny_config(**{"local.lr": 0.05})
  with pytest.raises(ValueError, match=r"another setting \(local\.lr: saved 0\.1, now 0\.05\)"):
    compare.run_grid(other, ["fedavg"], [0], str(tmp_path), progress=False, reuse=True)
  # Provenance: every summary names the code that produced it.
  summary = json.load(open(tmp_path / "fedavg" / "seed_0" / "summary.json"))
  assert set(summary["provenance"]) >= {"git_commit", "git_dirty", "jax", "backend"}


def test_provenance_is_the_code_at_the_start_of_the_run(tmp_path, monkeypatch):
  """A checkout moved while a run trains must not change what its summary says produced it."""
  calls = []
  def fake():
    calls.append(1)
    return {"git_commit": "at-start" if len(calls) == 1 else "moved", "git_dirty": False}
  monkeypatch.setattr(loop, "provenance", fake)
  summary = loop.run(tiny_config(), str(tmp_path), progress=False)
  assert summary["provenance"]["git_commit"] == "at-start"
  assert json.load(open(tmp_path / "summary.json"))["provenance"]["git_commit"] == "at-start"


def test_ablation_variant_with_gamma0_no_admm_equals_fedavg(tmp_path):
  """FedGMT with gamma = 0 and no ADMM is FedAvg: the variant machinery reaches the algorithm."""
  c = tiny_config(aggregation="uniform")
  results = compare.run_grid(c, ["fedavg", "fedgmt[admm=False,gamma=0]"], [0], str(tmp_path),
                             progress=False)
  a = [r["test_loss"] for r in results["fedavg"][0]["records"]]
  b = [r["test_loss"] for r in results["fedgmt[admm=False,gamma=0]"][0]["records"]]
  np.testing.assert_allclose(a, b, rtol=1e-5)


CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(CONFIG_DIR) if f.endswith(".py")))
def test_every_config_file_loads_and_validates(name):
  config_lib.validate(config_lib.load_config_file(os.path.join(CONFIG_DIR, name)))


def test_fedgmt_table2_rows_follow_the_paper():
  from fedjax_sharp.training.paper_configs import FEDGMT_ROWS
  path = os.path.join(CONFIG_DIR, "fedgmt_table2.py")
  for row in FEDGMT_ROWS:
    c = config_lib.load_config_file(path, f"cifar10,{row}")
    config_lib.validate(c)
    assert (c.local.epochs, c.local.batch_size, c.local.lr, c.rounds) == (5, 50, 0.01, 500)
    assert c.aggregation == "uniform" and c.data.augment == "crop_flip"
  assert config_lib.load_config_file(path, "cifar10,path2").data.shards_per_client == 2
  dir001 = config_lib.load_config_file(path, "fashion_mnist,dir0.01")
  assert dir001.data.alpha == 0.01 and dir001.data.long_tail and dir001.data.source == "idx"
  with pytest.raises(ValueError, match="DATASET,ROW"):
    config_lib.load_config_file(path, "cifar10,dir0.5")


def test_paper_configs_set_baselines_and_momentum_explicitly():
  path = os.path.join(CONFIG_DIR, "fedgmt_table2.py")
  c = config_lib.load_config_file(path, "cifar10,dir0.1")
  # FedGMT Table 7: rho = 5 x lr, beta = 10 as alpha = 1/beta, FedNTD beta = tau = 1.
  for name in ("fedsam", "fedspeed", "fedsmoo", "fedlesam_d"):
    assert c.algorithm[name].rho == pytest.approx(0.05)
  assert c.algorithm.fedspeed.lam == 10.0 and c.algorithm.fedspeed.variant == "code"
  assert c.algorithm.feddyn.alpha == c.algorithm.fedsmoo.alpha == 0.1
  assert (c.algorithm.fedntd.beta, c.algorithm.fedntd.tau) == (1.0, 1.0)
  # Momentum: 0.9 for the table, 0 for the algorithms whose papers use none.
  assert c.local.momentum == 0.9
  for name in ("scaffold", "fedgamma", "fedcm", "mofedsam", "mimelite"):
    assert c.algorithm[name].momentum == 0.0
  t1 = os.path.join(CONFIG_DIR, "mofedsam_table1.py")
  for arg, target in (("emnist", 0.8), ("cifar10", 0.8), ("cifar100", 0.5)):
    m = config_lib.load_config_file(t1, arg)
    config_lib.validate(m)
    assert m.local.momentum == 0.0 and m.eval.target_accuracy == target
  with pytest.raises(ValueError, match="expected one of"):
    config_lib.load_config_file(t1, "mnist")


def test_final_and_average_models_lambda_max_logging_and_run_hessian(tmp_path):
  from fedjax_sharp.training import run_analysis
  config = tiny_config(**{"rounds": 4, "eval.average_last": 2, "eval.hessian_every": 2,
                          "eval.hessian_examples": 50, "eval.hessian_iters": 5})
  run_dir = str(tmp_path / "run")
  exp = loop.build_experiment(config)
  loop.run(config, run_dir, progress=False, experiment=exp)
  records = metrics_lib.read_jsonl(os.path.join(run_dir, "metrics.jsonl"))
  assert [("lambda_max" in r) for r in records] == [False, True, False, True]
  assert all(r["lambda_max"] > 0 for r in records if "lambda_max" in r)
  final = loop.load_params(os.path.join(run_dir, loop.FINAL_PARAMS), exp.init_params)
  # eval.hessian_every goes through the analysis path: the last logged value is the final
  # model's lambda_max on the first 50 test examples, computed here by the other entry point.
  direct = exp.top_eigenvalues(final, k=1, iters=5, max_examples=50)[0]
  assert records[-1]["lambda_max"] == pytest.approx(float(direct), rel=1e-5)
  both = tiny_config(**{"eval.hessian_every": 2, "analysis.every": 1,
                        "analysis.metrics": ("lambda_max",)})
  with pytest.raises(ValueError, match="eval.hessian_every.*analysis.metrics"):
    config_lib.validate(both)
  average = loop.load_params(os.path.join(run_dir, loop.AVERAGE_PARAMS), exp.init_params)
  # The average of the last 2 global models: rerun 3 rounds to get the third model.
  three = tiny_config(**{"rounds": 3})
  loop.run(three, str(tmp_path / "three"), progress=False)
  third = loop.load_params(str(tmp_path / "three" / loop.FINAL_PARAMS), exp.init_params)
  for a, f, t3 in zip(*(jax.tree.leaves(p) for p in (average, final, third))):
    np.testing.assert_allclose(a, (f + t3) / 2, rtol=1e-5, atol=1e-6)
  summary = json.load(open(os.path.join(run_dir, "summary.json")))
  assert summary["averaged_models"] == 2
  # experiments/hessian.py's function: top-k of the saved final model, stored per model kind.
  res = run_analysis.run_hessian(run_dir, k=2, iters=30, method="lanczos")
  direct = exp.top_eigenvalues(final, k=2, iters=30, method="lanczos")
  np.testing.assert_allclose(res["eigenvalues"], direct, rtol=1e-5)
  run_analysis.run_hessian(run_dir, model="average", k=1, iters=5, max_examples=100)
  stored = json.load(open(os.path.join(run_dir, "hessian.json")))
  assert set(stored) == {"final", "average"} and stored["average"]["examples"] == 100
  with pytest.raises(FileNotFoundError, match="average_params"):
    run_analysis.run_hessian(str(tmp_path / "three"), model="average")


def test_compare_with_hessian_column(tmp_path):
  config = tiny_config()
  results = compare.run_grid(config, ["fedavg", "fedsam"], [0, 1], str(tmp_path), progress=False,
                             hessian={"k": 1, "iters": 5, "max_examples": 100})
  rows = compare.table_rows(results, 2, 0.0)
  assert all(r["lambda_max_mean"] > 0 for r in rows)
  assert "lambda_max" in compare.to_markdown(rows, 2, 0.0)
  # Target columns only with a target; every row has the header's number of cells.
  for target, columns in ((0.0, 8), (0.5, 10)):
    table = compare.to_markdown(rows, 2, target)
    assert ("rounds to 50%" in table) == bool(target)
    assert {line.count("|") - 1 for line in table.splitlines()} == {columns}
  assert os.path.exists(tmp_path / "fedsam" / "seed_1" / "hessian.json")


def test_read_jsonl_drops_a_torn_last_line_only(tmp_path):
  path = tmp_path / "m.jsonl"
  path.write_text('{"round": 0}\n{"round": 1}\n{"rou')
  assert metrics_lib.read_jsonl(str(path)) == [{"round": 0}, {"round": 1}]
  path.write_text('{"round": 0}\n{"rou\n{"round": 2}\n')
  with pytest.raises(ValueError, match=r"m\.jsonl: line 2 is not JSON"):
    metrics_lib.read_jsonl(str(path))


def test_bfloat16_compute_keeps_float32_weights_and_tracks_float32():
  from fedjax_sharp.models import registry
  f32 = loop.build_experiment(tiny_config())
  bf16 = loop.build_experiment(tiny_config(model__compute_dtype="bfloat16"))
  params = f32.init_params
  x = jnp.asarray(f32.dataset.x_test[:32], jnp.float32) / 255.0
  y = jnp.asarray(f32.dataset.y_test[:32])
  loss = lambda apply_fn: lambda p: -jnp.mean(
      jax.nn.log_softmax(apply_fn(p, x))[jnp.arange(32), y])
  g32 = jax.grad(loss(f32.apply_fn))(params)
  g16 = jax.grad(loss(bf16.apply_fn))(params)
  assert bf16.apply_fn(params, x).dtype == jnp.float32
  for a, b in zip(jax.tree.leaves(g32), jax.tree.leaves(g16)):
    assert b.dtype == jnp.float32                       # the weights' dtype, not bfloat16
    assert not np.array_equal(a, b)                      # really computed in bfloat16
    np.testing.assert_allclose(a, b, atol=0.02 * float(jnp.max(jnp.abs(a))))
  s32 = loop.run(tiny_config(), None, progress=False)
  s16 = loop.run(tiny_config(model__compute_dtype="bfloat16"), None, progress=False)
  assert abs(s32["final_test_accuracy"] - s16["final_test_accuracy"]) < 0.05
  with pytest.raises(ValueError, match="model.compute_dtype"):
    registry.with_compute_dtype(lambda p, x: x, "float8")


@pytest.mark.parametrize("strategy", ["host", "vmap"])
def test_micro_batch_trains_the_same_run_in_pieces(tmp_path, monkeypatch, strategy):
  # FedSAM (both SAM gradients go through the pieces), batches of 16 in pieces of 5 (5, 5, 5,
  # 1): the same run up to float rounding, through the real engine.
  from fedjax_sharp.models import registry
  used = []
  real = registry.in_pieces
  monkeypatch.setattr(registry, "in_pieces", lambda f, piece: used.append(piece) or real(f, piece))
  runs = {}
  for piece in (0, 5):
    c = tiny_config(**{"algorithm.name": "fedsam", "engine.micro_batch": piece,
                       "engine.client_strategy": strategy})
    workdir = str(tmp_path / f"piece{piece}")
    loop.run(c, workdir, progress=False)
    runs[piece] = metrics_lib.read_jsonl(os.path.join(workdir, "metrics.jsonl"))
  assert used == [0, 5]
  assert len(runs[0]) == len(runs[5]) == 3
  for a, b in zip(runs[0], runs[5]):
    for key in ("train_loss", "test_loss"):
      assert b[key] == pytest.approx(a[key], rel=1e-5), key
    assert b["test_accuracy"] == pytest.approx(a["test_accuracy"], abs=1e-3)


def test_seed_aggregation_and_reports_on_hand_made_metrics(tmp_path):
  # Two algorithms x two seeds of hand-made records: the table's numbers by hand.
  def run(values, comm=(1, 1), lam=None):
    records = [{"round": t, "test_accuracy": v, "round_time_s": 1.0, "bytes_total": 10 ** 6 * t}
               for t, v in enumerate(values)]
    for r, value in zip(records, lam or []):
      r["lambda_max"] = value
    return {"records": records, "hessian": None,
            "summary": {"final_test_accuracy": values[-1],
                        "communication": {"down": comm[0], "up": comm[1]}}}
  results = {"a": [run([0.1, 0.5, 0.7], lam=[3.0, 2.0, 1.0]), run([0.2, 0.6, 0.8])],
             "b_x": [run([0.3, 0.4, 0.4]), run([0.3, 0.4, 0.6])]}
  rows = compare.table_rows(results, 2, 0.55)
  # a: seed means over the last 2 rounds 0.6 and 0.7 -> mean 0.65, std 0.05 (over seeds).
  assert rows[0]["acc_last_n_mean"] == pytest.approx(0.65)
  assert rows[0]["acc_last_n_std"] == pytest.approx(0.05)
  # Seed 0 reaches 0.55 in its 3rd round, seed 1 in its 2nd: the mean of 3 and 2.
  assert rows[0]["rounds_to_target"] == pytest.approx(2.5)
  assert rows[1]["rounds_to_target"] is None                   # one seed never reached 0.55
  tex = compare.to_latex(rows, 2)
  assert "\\textbf{65.00} $\\pm$ 5.00" in tex and "b\\_x" in tex
  compare.write_reports(results, str(tmp_path), 2, 0.55)
  for name in ("results.md", "results.csv", "results.tex", "accuracy.png",
               "accuracy_vs_bytes.png", "lambda_max.png"):
    assert os.path.exists(tmp_path / name), name
  assert not compare.plot_series(results, "hessian_trace", str(tmp_path / "none.png"))


def test_geometry_table_aggregates_final_model_analyses_over_seeds(tmp_path):
  """geometry.md/.csv from hand-made hessian.json / analysis.json entries: mean and std over
  the seeds that have each analysis, the count where some lack it, nothing for unanalysed."""
  def run(lam=None, trace=None, p10=None, gap=None, gg=None):
    analysis = {}
    if trace is not None:
      analysis["final_sharpness"] = {"hessian_trace": trace, "sam_sharpness": 0.1}
    if p10 is not None:
      analysis["final_clients"] = {"client_acc_p10": p10, "participation_gap": gap}
    if gg is not None:
      analysis["final_global_local"] = {"global_on_global": gg, "global_on_client_mean": 2 * gg,
                                        "local_on_client_mean": 3 * gg}
    return {"records": [{"round": 0, "test_accuracy": 0.5, "round_time_s": 1.0,
                         "bytes_total": 1}],
            "hessian": None if lam is None else {"lambda_max": lam}, "analysis": analysis,
            "summary": {"final_test_accuracy": 0.5, "communication": {"down": 1, "up": 1}}}
  results = {"a": [run(lam=4.0, trace=100.0, p10=0.5, gap=0.1, gg=1.0),
                   run(lam=6.0, trace=140.0, p10=0.7, gap=None, gg=3.0)],
             "b": [run(lam=2.0), run()],
             "c": [run(), run()]}
  rows = compare.geometry_rows(results)
  assert [r["algorithm"] for r in rows] == ["a", "b"]          # c: nothing analysed
  a, b = rows
  assert a["lambda_max_mean"] == pytest.approx(5.0) and a["lambda_max_std"] == pytest.approx(1.0)
  assert a["hessian_trace_mean"] == pytest.approx(120.0)
  assert a["hessian_trace_std"] == pytest.approx(20.0)
  assert a["client_acc_p10_mean"] == pytest.approx(0.6)
  assert a["participation_gap_n"] == 1 and a["participation_gap_mean"] == pytest.approx(0.1)
  assert a["local_on_client_mean_mean"] == pytest.approx(6.0)
  assert b["lambda_max_n"] == 1 and b["hessian_trace_n"] == 0
  table = compare.geometry_markdown(rows)
  lines, legend = table.split("\n\n")
  lines = lines.splitlines()
  assert {line.count("|") - 1 for line in lines} == {2 + len(compare.GEOMETRY)}
  assert legend == compare.GEOMETRY_LEGEND + "\n" and "x: no run has it" in legend
  assert "| a | 2 | 5 (1) | 120 (20) |" in table
  assert "60.00 (10.00)" in lines[2] and "10.00 [1]" in lines[2]  # percent; 1 of 2
  assert lines[3].startswith("| b | 2 | 2 [1] | x |")   # one value: no spread shown
  assert b["lambda_max_std"] is None
  compare.write_reports(results, str(tmp_path), 1, 0.0)
  csv_rows = (tmp_path / "geometry.csv").read_text().splitlines()
  assert csv_rows[0].startswith("algorithm,seeds,lambda_max_mean,lambda_max_std,lambda_max_n")
  assert len(csv_rows) == 3 and (tmp_path / "geometry.md").read_text() == table
  compare.write_reports({"c": results["c"]}, str(tmp_path / "none"), 1, 0.0)
  # One seed: lambda_max without a spread over seeds in results.md / results.tex.
  compare.write_reports({"d": [run(lam=3.0)]}, str(tmp_path / "one"), 1, 0.0)
  assert (tmp_path / "one" / "results.md").read_text().splitlines()[2].endswith("| 3 |")
  assert "& 3 \\\\" in (tmp_path / "one" / "results.tex").read_text()
  assert not os.path.exists(tmp_path / "none" / "geometry.md")
  assert not os.path.exists(tmp_path / "landscapes.png")         # no run has a landscape
  # landscapes.png from the first run of each algorithm that has RUN/landscape.npz.
  axis = np.linspace(-1, 1, 5)
  for name, runs in results.items():
    for seed, r in enumerate(runs):
      r["run_dir"] = str(tmp_path / name / f"seed_{seed}")
      r["summary"]["seed"] = seed
  os.makedirs(results["a"][1]["run_dir"])
  np.savez(os.path.join(results["a"][1]["run_dir"], "landscape.npz"), alpha=axis, beta=axis,
           loss=np.add.outer(axis ** 2, axis ** 2))
  compare.write_reports(results, str(tmp_path), 1, 0.0)
  assert os.path.exists(tmp_path / "landscapes.png")


def test_tensorboard_scalars_mirror_metrics_jsonl(tmp_path):
  import glob
  import struct
  from tensorboardX.proto import event_pb2
  loop.run(tiny_config(log__tensorboard=True), str(tmp_path), progress=False)
  files = glob.glob(str(tmp_path / "tensorboard" / "events.out.tfevents.*"))
  assert len(files) == 1
  scalars = {}
  with open(files[0], "rb") as f:   # TFRecord: length, crc, event proto, crc
    while header := f.read(12):
      (length,) = struct.unpack("<Q", header[:8])
      event = event_pb2.Event.FromString(f.read(length))
      f.read(4)
      for v in event.summary.value:
        scalars[(v.tag, event.step)] = v.simple_value
  records = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
  for r in records:
    assert scalars[("train_loss", r["round"] + 1)] == pytest.approx(r["train_loss"], rel=1e-6)
  last = records[-1]
  assert scalars[("test_accuracy", last["round"] + 1)] == pytest.approx(last["test_accuracy"])


def test_config_json_holds_the_blocks_the_run_used_and_reads_back_whole(tmp_path):
  """config.json keeps the run-level fields and the blocks the run's choices pick (one
  algorithm's hyperparameters, not all 31), and reads back over the base config: the analysis
  commands rebuild the run from it. Deliberate bug caught: every algorithm's block written
  (378 lines), or a trimmed config.json read back without the fields it left out."""
  from fedjax_sharp.training import run_analysis   # pylint: disable=g-import-not-at-top
  loop.run(tiny_config(rounds=1, algorithm__name="fedprox"), str(tmp_path), progress=False)
  saved = json.loads((tmp_path / "config.json").read_text())
  assert sorted(saved["algorithm"]) == ["fedprox", "name"]
  assert set(saved["task"]) == {"name"}
  back = run_analysis.load_run_config(str(tmp_path))
  assert back.algorithm.fedgmt.alpha == config_lib.base_config().algorithm.fedgmt.alpha
  assert back.algorithm.fedprox.mu == saved["algorithm"]["fedprox"]["mu"]
  config_lib.validate(back)
