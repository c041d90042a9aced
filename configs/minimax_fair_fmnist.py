"""Fair classification over classes on Fashion-MNIST with federated minimax (offline).

    min_x max_{y in simplex} sum_c y_c L_c(x) - (lambda/2) ||y||^2,   lambda = 0.1 (our choice)

15 clients, Dirichlet(0.1) label split, all clients every round, K = 5 local steps of batch 32,
McMahan CNN, 200 rounds; local SGD with eta_x = 0.05 (model) and eta_y = 0.01 (class weights);
FESS-GDA p = 0.5, beta = 0.1; Local SGDA+ refreshes its snapshot every 10 rounds; Fed-Norm-SGDA
with plain averaging rates. This is the setting of the baselines' papers (Sharma et al.) moved
to Fashion-MNIST; the FESS-GDA paper's own fair-classification settings are not available.

    python experiments/compare.py --config=configs/minimax_fair_fmnist.py --reuse \
        --algorithms=fess_gda,local_sgda,local_sgda_plus,fed_norm_sgda --seeds=0,1,2 \
        --workdir=runs/minimax_fair

Reported: worst-class test accuracy (mean of the last 20 rounds, each evaluated; every 5th
round before), mean
test accuracy and the weights y in metrics.jsonl. Measured numbers: docs/reproducing.md,
"FESS-GDA (Shen et al., AISTATS 2024)".
"""
from fedjax_sharp.training.config import base_config


def get_config():
  c = base_config()
  c.name = "minimax_fair_fmnist"
  c.task.name = "fair_classification"
  c.task.fair_classification.lam = 0.1
  c.data.source, c.data.name = "idx", "fashion_mnist"
  c.data.num_clients = 15
  c.data.partition = "dirichlet"
  c.data.dirichlet_mode = "label"
  c.data.alpha = 0.1
  c.clients_per_round = 15
  c.aggregation = "examples"        # weights n_i / n make the client objectives sum to f
  c.model.name = "mcmahan_cnn"
  c.local.steps = 5
  c.local.batch_size = 32
  c.minimax.update(lr_x=0.05, lr_y=0.01)
  c.algorithm.name = "fess_gda"
  c.algorithm.fess_gda.update(p=0.5, beta=0.1)
  c.algorithm.local_sgda_plus.snapshot_every = 10
  c.rounds = 200
  c.eval.every = 5                  # and every one of the last 20 rounds
  c.eval.last_n = 20
  c.checkpoint_every = 50
  return c
