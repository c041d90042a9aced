"""The hooks a run calls after each round (`training.hooks`), each on its own: in-process, on
hand-made rounds, no model compiled."""
import dataclasses
import json
import logging as std_logging
import types

import numpy as np
import pytest

from fedjax_sharp.errors import DivergedError
from fedjax_sharp.training import hooks


def _round(t, record=None, params=None, finite=True, **kwargs):
  return hooks.Round(t=t, record=dict(record or {"train_loss": 0.5}), params=params,
                     server_state=None, client_table=None, cohort=None, finite=finite, **kwargs)


def test_cadence_is_every_n_rounds_and_the_last_one():
  assert [t for t in range(7) if hooks.Hook(rounds=7, every=3).due(t)] == [2, 5, 6]
  assert [t for t in range(7) if hooks.Hook(rounds=7).due(t)] == [6]   # every = 0: last only


def test_the_divergence_guard_stops_on_a_non_finite_round_and_warns_when_told(caplog):
  guard = hooks.DivergenceGuard("stop")
  guard.on_round(_round(3))                               # finite: nothing happens
  with pytest.raises(DivergedError, match="round 4: non-finite .* none .*'stop'"):
    guard.on_round(_round(4, {"train_loss": float("nan")}, finite=False))
  with caplog.at_level(std_logging.WARNING):
    hooks.DivergenceGuard("warn").on_round(_round(4, {"train_loss": float("inf")}, finite=False))
  assert "continuing: training.on_nonfinite='warn'" in caplog.text


def test_the_averager_averages_the_last_n_models_and_saves_the_mean(tmp_path):
  path = str(tmp_path / hooks.AVERAGE_PARAMS)
  averager = hooks.Averager(rounds=5, last=2, path=path)
  for t in range(5):
    averager.on_round(_round(t, params={"w": np.full(3, float(t), np.float32)}))
  assert averager.count == 2
  np.testing.assert_allclose(averager.average()["w"], [3.5, 3.5, 3.5])   # rounds 3 and 4
  saved = hooks.load_params(path, {"w": np.zeros(3, np.float32)})
  np.testing.assert_allclose(saved["w"], [3.5, 3.5, 3.5])


def test_the_metrics_writer_puts_each_record_on_disk_before_the_next_round(tmp_path):
  path = tmp_path / "metrics.jsonl"
  records = []
  writer = hooks.MetricsWriter(records, str(path))
  for t in range(2):
    writer.on_round(_round(t, {"round": t}))
    assert [json.loads(l)["round"] for l in open(path)] == list(range(t + 1))  # not closed yet
  writer.close("interrupted")
  resumed = hooks.MetricsWriter(records, str(path), truncate=False)   # a resumed run appends
  resumed.on_round(_round(2, {"round": 2}))
  resumed.close("completed")
  assert [json.loads(l)["round"] for l in open(path)] == [0, 1, 2]
  assert [r["round"] for r in records] == [0, 1, 2]
  memory_only = hooks.MetricsWriter([], None)
  memory_only.on_round(_round(0, {"round": 0}))
  assert memory_only.records == [{"round": 0}]


def test_the_evaluator_runs_on_its_rounds_and_never_on_a_non_finite_model():
  calls = []
  exp = types.SimpleNamespace(metric="test_accuracy",
                              evaluate=lambda p: calls.append(p) or {"test_accuracy": 0.9})
  evaluator = hooks.Evaluator(exp, rounds=10, every=4, last_n=2)
  records = []
  for t in range(10):
    rnd = _round(t, params=t, finite=t != 8)
    evaluator.on_round(rnd)
    records.append(rnd.record)
  assert calls == [3, 7, 9]                              # every 4th; the last 2 but not round 8
  assert records[0]["test_accuracy"] is None and records[0]["test_loss"] is None


def test_the_clock_continues_the_wall_time_of_a_resumed_run():
  now = [100.0]
  clock = hooks.Clock(offset=30.0, clock=lambda: now[0])
  now[0] = 112.0
  rnd = _round(0, t_round=110.0)
  clock.on_round(rnd)
  assert rnd.record["round_time_s"] == 2.0 and rnd.record["wall_time_s"] == 42.0
  swept = _round(1, t_round=0.0, round_time=0.5)          # a sweep passes its round's time
  clock.on_round(swept)
  assert swept.record["round_time_s"] == 0.5


def test_checkpoints_artifacts_and_the_final_model_on_their_rounds(tmp_path, monkeypatch):
  saved, tags = [], []
  monkeypatch.setattr(hooks.checkpoints, "save",
                      lambda workdir, config, next_round, *a: saved.append((next_round, a[1])))
  config = types.SimpleNamespace(rounds=5)
  checkpointer = hooks.Checkpointer(config, str(tmp_path), every=2, keep=2)
  artifacts = hooks.Artifacts(lambda params, workdir, tag: tags.append(tag), str(tmp_path),
                              rounds=5, every=3)
  final = hooks.FinalModel(5, str(tmp_path / hooks.FINAL_PARAMS))
  for t in range(5):
    table = (lambda t=t: f"table {t}") if t % 2 else f"table {t}"   # a sweep's lazy table
    rnd = hooks.Round(t=t, record={"bytes_total": 10 * t}, params={"w": np.float32(t)},
                      server_state=None, client_table=table, cohort=None, finite=True)
    for hook in (checkpointer, artifacts, final):
      hook.on_round(rnd)
  assert saved == [(2, "table 1"), (4, "table 3"), (5, "table 4")]
  assert tags == ["round00003", "final"]
  assert float(hooks.load_params(str(tmp_path / hooks.FINAL_PARAMS),
                                 {"w": np.float32(0)})["w"]) == 4.0


def test_server_stats_put_the_algorithms_scalars_in_the_record():
  state = types.SimpleNamespace(c=np.float32(0.25), divergence=np.float32(1.5))
  hook = hooks.ServerStats(lambda s: {"gf_c": s.c, "gf_divergence": s.divergence})
  rnd = dataclasses.replace(_round(3, {"train_loss": 0.5}), server_state=state)
  hook.on_round(rnd)
  assert rnd.record == {"train_loss": 0.5, "gf_c": 0.25, "gf_divergence": 1.5}
  assert all(type(v) is float for v in rnd.record.values())    # JSON-ready
