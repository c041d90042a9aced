"""Shakespeare next-character prediction (TFF's federated Shakespeare, 715 speaking roles).

Data: TFF's `shakespeare.sqlite`, fetched once (1.3 MB, pinned SHA-256) into
~/.cache/fedjax_sharp (or $FEDJAX_SHARP_DATA) because data.path is empty and data.download is
True; offline, put `shakespeare.sqlite.lzma` in <cache>/downloads/ or set data.path to the
decompressed file. Preprocessing as fedjax's: each snippet becomes BOS, its characters, EOS;
a role's snippets are joined and cut into rows of 80 inputs / 80 next-character targets
(`data/natural.py`). Natural partition: one client per role (data.num_clients = 0: all).
Model: the character LSTM of fedjax / TFF (embedding 8, two LSTM layers of 256, dense to the
90 ids; 820,522 parameters). Loss: mean cross-entropy over the non-padding targets; accuracy:
over the targets that are characters (padding, BOS and EOS excluded; fedjax's
'accuracy_no_eos'). Clients are sampled uniformly and aggregated by example count, as in
Reddi et al. (2021), whose FedAvg setting this is: 10 clients per round, 1 epoch, batch 4,
client SGD lr 1, server SGD lr 1, 1,200 rounds.

    python experiments/run.py --config=configs/shakespeare_lstm.py --workdir=runs/shakespeare

Expected: Reddi et al. (2021, Table 2) report 56.9% test accuracy for FedAvg after 1,200
rounds (their loss is fedjax's per-sequence mean, ours the token mean: equal minimisers,
learning rates may need retuning). Not measured here: the dataset cannot be fetched on the
build machine (docs/known_gaps.md, "Data").
"""

from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "shakespeare_lstm"
  c.data.source, c.data.name, c.data.path = "federated_sqlite", "shakespeare", ""
  c.data.partition, c.data.num_clients = "natural", 0
  c.data.max_length = 80
  c.model.name = "char_lstm"
  c.algorithm.name = "fedavg"
  c.clients_per_round = 10
  c.aggregation = "examples"
  c.local.update(epochs=1, batch_size=4, lr=1.0, lr_decay=1.0, momentum=0.0,
                 weight_decay=0.0)
  c.rounds = 1200
  c.eval.every = 20
  c.eval.last_n = 5
  c.checkpoint_every = 100
  return c
