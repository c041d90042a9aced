"""Stack Overflow next-word prediction (TFF's federated Stack Overflow, 342k users).

Data: TFF's `stackoverflow.sqlite` and `stackoverflow.word_count`, fetched once into
~/.cache/fedjax_sharp (or $FEDJAX_SHARP_DATA) because data.path is empty and data.download is
True (the SQLite file is large: 135M training posts); offline, put the published files in
<cache>/downloads/ or set data.path (and data.federated_sqlite.word_counts_path).
Vocabulary: the 10,000 most frequent words of TFF's word-count file; ids PAD 0, BOS 1, EOS 2,
words 3..10002, OOV 10003.
Each post is one row of 20: inputs [BOS, words], targets [words, EOS] (`data/natural.py`).
Natural partition: one client per user; data.num_clients picks a seeded subset of users.
Model: fedjax's / TFF's word LSTM (embedding 96, LSTM 670, dense 96, dense to 10,004 ids;
4,050,748 parameters). Loss: mean cross-entropy over the non-padding targets. Accuracy: the
in-vocabulary words only (targets PAD, BOS, EOS and OOV excluded from the numerator and the
denominator; TFF's 'accuracy_without_out_of_vocab_or_end_of_sentence'). Setting of Reddi et
al. (2021) for FedAvg: 50 clients per round, 1 epoch, batch 16, client SGD lr 10^-0.5, server
SGD lr 1, 1,500 rounds.

    python experiments/run.py --config=configs/stackoverflow_lstm.py --workdir=runs/so

Expected: Reddi et al. (2021, Table 2) report 19.5% for FedAvg (25.2% FedAdam) after 1,500
rounds, with at most 256 posts per client (not applied here: every post of a user is used).
Not measured here: the dataset cannot be fetched on the build machine (docs/known_gaps.md,
"Data").
"""

from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "stackoverflow_lstm"
  c.data.source, c.data.name, c.data.path = "federated_sqlite", "stackoverflow", ""
  c.data.partition, c.data.num_clients = "natural", 0
  c.data.max_length = 20
  c.data.vocab_max_size = 10000
  c.model.name = "word_lstm"
  c.algorithm.name = "fedavg"
  c.clients_per_round = 50
  c.aggregation = "examples"
  c.local.update(epochs=1, batch_size=16, lr=10 ** -0.5, lr_decay=1.0, momentum=0.0,
                 weight_decay=0.0)
  c.rounds = 1500
  c.eval.every = 50
  c.eval.last_n = 5
  c.checkpoint_every = 100
  return c
