"""The "Sources and notes" section of every algorithm's docs page: where the rule was read (the
paper, the authors' code with files and lines), where the paper and the code differ and which
one the library follows, where each default comes from, and what a run would have to reproduce.

`docs/gen_algorithm_pages.py` renders `NOTES[name]` at the end of `docs/algorithms/<name>.md`,
after the module docstring (the rule's symbols and its tested reductions: all a reader of the
code needs) and the defaults table. Keys are registered names; algorithms of one module share
their notes. Markdown; a default of the algorithm is written `{{field}}` and a constant of the
package `{{module.CONSTANT}}` (`gen_algorithm_pages.PLACEHOLDER`), so the page shows the code's
value; `tests/test_algorithm_pages.py` refuses a default or constant written by hand. Other
numbers (a paper's table, a line of the authors' code, a value the authors' code uses and the
library does not) are written as they are.
"""

_DP_FEDSAM = r"""
**Sources.** The authors' code, YMJS-Irfan/DP-FedSAM at commit 016bd7fc (2023-08-11), read
through the specification (`new_algorithms.md`, Part 2, section 3):

- local step: `fedml_api/dpfedsam/my_model_trainer.py` L55-74 and `sam.py` L5-80 (`first_step` /
  `second_step`; ASAM scales every tensor, biases included: `asam_biases`, `eta` = 0);
- `--adaptive` defaults to True and cannot be switched off from the command line
  (`main_dpfedsam.py` L81: `type=bool`), so the code always runs ASAM: `adaptive=True` here;
- DP: `dpfedsam_api.py` L61-85: `Delta_m[l] *= min(1, C / ||Delta_m[l]||)` per tensor (L76) and
  noise std `sigma * C / sqrt(client_num_per_round)` added per client (L73, L77);
- aggregation L148-163: weights `n_m / sum n`, all `n_m` equal in its partitions, so `1/m`; here
  the uniform weights DP needs (`aggregation='auto'` resolves to 'uniform');
- defaults (`main_dpfedsam.py` L36-110 and the README's commands), the library's too:
  `clip_norm` ({{clip_norm}}), `noise_multiplier` ({{noise_multiplier}}), `rho` ({{rho}}),
  `momentum` ({{momentum}}), `weight_decay` ({{weight_decay}}); learning rate 0.1 with decay
  0.998 per round (the run's `local.lr` and `local.lr_decay`, set by its config).

**Paper vs code.** The paper body was not readable (only the abstract: "clipping local updates
and adding random noise", "Sharpness Aware Minimization"), so the code's choices are the
defaults (the library's rule where only the code is known): per-tensor clipping (`clip='global'`
is the abstract's reading, one norm over the whole update), client-side noise
(`noise='server'`: one draw on the sum, the same distribution of the aggregate), ASAM
(`adaptive=False`: SAM). The arXiv page (ar5iv 2303.11242) could be read only to the
introduction; a third-party summary of the paper (junaidaliop.github.io/zij/math/dpfedsam, not
checked against the PDF) writes its rule as SAM with `rho g/||g||`, one global clip
`min(1, C/||Delta||)` and client noise `N(0, sigma^2 C^2/m)`: `adaptive=False, clip='global'`
here.

**Accounting.** The run counts the sensitivity of per-tensor clipping, `C sqrt(L)` for `L`
tensors; the authors' offline script (`eps_computer.py`) does not
(`core.accounting.dpfedsam_epsilon` reproduces that script).
"""

_FED_GF = r"""
**Sources.** Only the paper's abstract and first page could be read (not Algorithm 1 in its
Appendix C nor its tables; the proceedings page, proceedings.mlr.press/v235/lee24aa.html, PMLR
235:27037-27071, gives the abstract), so the rule is the authors' code: hwan-sig/Official-FedGF
@ 36233b7 (2024-06-21), `fedlab/contrib/algorithm/fedgf.py` (server L21-70, client L80-135; the
mix `w_p` at L134, the server's order in `global_update`, L37-70), `minimizers.py`
(`SAM.ascent_step` L50-69), `fedavg.py` L15-21 (aggregation), `basic_client.py` L119-137 (spec
`new_algorithms.md` Part 2, 1).

**Paper vs code.** The code's SAM ascent adds 1e-16 to the gradient's norm, the library
{{core.tree.NORM_EPS}} (`core.sam`). The code uploads `w_m` (the same information as
`Delta_m`). The code's global perturbation has no epsilon (0/0 = NaN when `Delta = 0`); here
{{core.tree.NORM_EPS}}, so a zero `Delta` leaves `w~ = w`. In round 0 the code's `w~ = None`
branch gives the same FedSAM round as `c = 0`. The maintainer (hwan-sig/Official-FedGF#2): "If
the c value is close to 0, it operates as FedSAM, and if it is close to 1, it operates as
fedgf." `c` takes the values 0, 1/L, ..., 1 with `L = min(t + 1, W)` entries in the window.

**Defaults and their sources.** `rho` ({{rho}}): from the example script's grid {0.02, 0.05,
0.1}. `g_rho`: `rho` when unset (`tools/Lib/algorithms.py` L95-96). `W` ({{W}}):
`tools/experiments/cifar.sh`. `T_D` ({{T_D}}): the parser defines no default for it, and the
example script passes `--c_o` with {0.2, 0.3} instead, a flag the parser does not define (so
the script as written stops at argparse); the most plausible reading (followed in
hwan-sig/Official-FedGF#2) is that this is the `T_D` grid, and its first value is the default
here. Client: SGD with `momentum` ({{momentum}}) and `weight_decay` ({{weight_decay}}), the
parser's defaults, and a constant learning rate (`tools/main.py` has no decay: set
`local.lr_decay = 1` to match). The code shares one optimiser object across clients and rounds;
without momentum that has no effect, and a momentum buffer carried from client to client would
be an artefact, so here every client starts with a fresh optimiser state.

Client compute: two forward/backward passes per step.
"""

_FED_GLOSS = r"""
**Paper vs code.** Algorithm 1 as first published writes `w^t` in the dual update (line 19);
the authors' corrected figure and code use `w~`, as here. The radii are schedules of the round
(Appendix C.2, `core.schedules.linear_ramp`): from `rho0` ({{rho0}}) ramping linearly to `rho`
(server) and `rho_l` (clients) over the first `ramp_rounds` rounds, constant afterwards (and
from the start without a ramp).

Options reproducing the authors' code (`codebase/fedgloss_server.py`), off by default:

- `dual_scale='code'`: the server dual's sum divided by `beta * M * |S_t|` (line 68): a
  `|S_t|`-times smaller dual than the paper's `beta * M`;
- `server_schedule='code'`: the server radius `rho_l + (rho - rho_0)/T_s` during the ramp, `rho`
  after it (`core.schedules.fedgloss_code_server_rho`);
- `refresh_per_epoch=True`: the local dual and the prox anchor refreshed once per local epoch.
  The spec expected this to matter for E > 1; it does not: the step
  `g - (sigma_k - (w_e - w~)/beta) + (w - w_e)/beta` equals the paper's
  `g - sigma_k + (w - w~)/beta`, and so does the final dual (tested equal up to float rounding).

NaiveFedGloSS (`naive=True`, Table 6) is our reading of Section 5.1.1. Paper settings:
[Reproducing the papers](../reproducing.md) and `configs/fedgloss_table3.py`.
"""

_FED_GMT = r"""
**Paper vs code.** The `tau^2` factor is the usual distillation scaling (option `tau_squared`);
the paper's Eq. (9) writes `gamma * l_KL` without saying how the temperature enters.
Algorithm 1 averages uniformly, `1/|N_t|`: use `aggregation='uniform'` to reproduce it.
Bookkeeping 'authors' (their public code; equal to 'paper' up to float rounding): each client
keeps `D_m = sum over its rounds of (w_{m,K} - w^t)` (`u_m = -D_m / beta`), the local loss gets
`+ (1/beta) <w, D_m>` (so the same `grad - u_m` reaches the optimiser), and the server keeps
`S = sum_{all m} D_m` (`u = -S / (beta M)`) and sets `w^{t+1} = avg + S / M`. `admm=False` is
the ablation of Table 3.

FedGMT-v2 is the communication-efficient form of Section 3.3; the client's EMA update is
Algorithm 1, line 7. Before its first participation `e_m` is the first global model the client
receives (`v2_ema_init='first_received'`, so the first update gives `w^t`) or `w^0` ('w0').

**Defaults** (paper Section 4.1 and Table 7): `gamma` ({{gamma}}), `tau` ({{tau}}), `alpha`
({{alpha}}; the paper's value for this algorithm: FedGMT's and FedGMT-v2's differ), `beta`
({{beta}}; the paper uses 100 for AG News).
"""

_FED_NSAM = r"""
**Sources.** Only the paper's abstract could be read (the stored copies of
arxiv.org/abs/2602.23827 and of its HTML version reach the abstract and the first lines of the
introduction, not the algorithm box, the hyperparameters or the tables): FedNSAM "introduc[es]
global Nesterov momentum into the local update" and "uses the global Nesterov momentum as the
direction of local estimation of client global perturbations and extrapolation". The rule is
therefore the authors' code; the default is their HEAD code, and the repositories' other
versions are the `variant` option. The same authors cite the work as "Consistency of local and
global flatness for federated learning", Proc. 33rd ACM International Conference on Multimedia
(ACM MM 2025), pp. 3875-3883, doi 10.1145/3746027.3755226 (the reference lists of their later
papers); that version was not read either. Code (spec `new_algorithms.md` C):
junkangLiu0/FedSWA @ f725be9 (`main_FedSWA.py`), junkangLiu0/FedNSAM @ c3c9e90
(`main_FedNSAM.py`, `optimizer/Nesterov.py`) and @ d41b5e6 (`new_NSAM.py`, July 2025).

**The variants in the code.**

- `n2` (the authors' HEAD code): `main_FedSWA.py` `update_NSAM` L1096-1130 and
  `apply_weights_avgACG` L1317-1338. The code sends `w` and `m` and adds them on the client
  (L1102); the SAM ascent is `sam.py` L19-25, the clip L1123, the SGD step L1106 (no momentum),
  the upload from the extrapolated start L1129; the server L1325-1336 (`m^1 = Delta` in round
  0, which is the rule with `m^0 = 0`).
- `n1` (`main_FedNSAM.py` as written, L1355-1374): the server's loop reads the mean delta where
  the old momentum was meant (`momen_m[k] = gamma * v + sum_weights[k]` over
  `sum_weights.items()`), so `m^{t+1} = (1 + gamma) Delta` for t >= 1 (`m^1 = Delta` in round 0,
  `momen_m == {}`). It looks unintended: the same file keeps the recursive form as the unused
  `apply_weights_avgACG2`.
- `n3` (July 2025, `new_NSAM.py` `update_FedNesterov` L1842-1863 with the July
  `optimizer/Nesterov.py` L24-59): the server is n2's (L957-976); `rho` is unused (its term is
  commented out, L56). Read from the code, not run: under PyTorch >= 2.0 `zero_grad` sets
  gradients to None and the July optimizer then skips the extrapolation; the library follows the
  intended reading (extrapolation applied).
- `n4` (the HEAD `optimizer/Nesterov.py` `first_step` L24-59, `e_w` L56, called by no HEAD
  script; the one closest to the abstract): Nesterov extrapolation along the global momentum and
  a SAM-type perturbation along `-m/||m||`, one gradient per step; its norm guard is the code's
  `+ {{algorithms.fed_nsam.N4_NORM_EPS}}`. The round loop around it is n3's (its July caller),
  our composition: no script runs it.

**Defaults**, all from the HEAD code (the paper's are unknown): `gamma` ({{gamma}}; the client
extrapolation is hard-coded at L1099, the server momentum at L1319: one field here, both n2
values equal); `rho` ({{rho}}; hard-coded at L1100: the README's `--rho` is ignored by the
workers); client SGD with `momentum` ({{momentum}}) and coupled `weight_decay`
({{weight_decay}}); clipping of the SAM gradient at global norm 10 for n1/n2 and none for n3/n4
(`clip_norm` None takes the variant's). The clip is PyTorch's `clip_grad_norm_`, the code's
(`core.optimizers.clip_by_global_norm`: `max / (norm + eps)`, eps =
{{core.optimizers.CLIP_EPS}}, capped at 1).

Not part of the algorithm and left to the config: the round learning rate (HEAD: cosine
`0.5 eta_0 (1 + cos(pi t / T))` over T = 301 rounds, `eta_0` 0.1; July: `eta_0 0.998^(t+1)`),
K = 50 local steps (E = 5 epochs of B = 50 capped at `args.K`), 10 of 100 clients, uniform
weights. The code averages BatchNorm running statistics with everything else; here only the
parameters are averaged.

Communication per sampled client: n1/n2 1 down (`w_hat`), 1 up; n3/n4 2 down (`w`, `m`), 1 up.
Client compute: two forward/backward passes per step (n1/n2), one (n3/n4).
"""

_FED_SWA = r"""
**Sources.** The paper (ICML 2025, PMLR 267:38894-38939, arXiv:2507.20016) itself could not be
read: the stored copies give its abstract only. Its Algorithm 1, hyperparameters and tables are
second-hand: Algorithm 1 and Section 6.1 as transcribed by secondary sources (a paper-notes
summary, a third-party design note and a re-implementation's tests; spec `new_algorithms.md`
[P2]). Code: junkangLiu0/FedSWA `main_FedSWA.py` @ f725be9 (HEAD) L840/848/967 (SGD,
weight decay, no momentum), L855/983 (the clip); `main.py` @ 6f3e52c (the ICML release) L2153,
L2161. The paper and the code average uniformly, `1/|N_t|` (the code's clients all hold
`n_m = 500` examples); `aggregation='auto'` gives 'uniform' here.

**Local optimiser** (both algorithms, their own block fields, not `config.local`'s): SGD with
`momentum` ({{momentum}}), coupled `weight_decay` ({{weight_decay}}: `d = g + lambda y`), and
the raw gradient clipped to global L2 norm `clip_norm` ({{clip_norm}}) before the control
correction is added (PyTorch's `clip_grad_norm_`, which the authors' code calls between
`backward()` and its edits of `.grad`; the decay term is not clipped).

**Variants** (`variant`; the fields left None take the variant's value):

- 'paper' (default): s = {{algorithms.fed_swa.FEDSWA_PRESETS.paper.peak}}; FedSWA
  rho = {{algorithms.fed_swa.FEDSWA_PRESETS.paper.rho}}, alpha =
  {{algorithms.fed_swa.FEDSWA_PRESETS.paper.alpha}}; FedMoSWA also gamma =
  {{algorithms.fed_swa.FEDMOSWA_PRESETS.paper.gamma}} and the momentum rule from round 0
  (`m^0 = 0`). The ICML release `main.py` implements the same FedSWA schedule (L2147-2163) and
  server step (L1641, `--alpha`).
- 'code': the authors' HEAD code (`main_FedSWA.py` @ f725be9). FedSWA (`update_FedSWA`,
  L837-862): s = {{algorithms.fed_swa.FEDSWA_PRESETS.code.peak}} (L848, the optimiser is rebuilt
  with lr*2 before every step) and rho = {{algorithms.fed_swa.FEDSWA_PRESETS.code.rho}}
  (hard-coded, L842; `--rho` is ignored), so `eta_k = 2 eta_t (1 - k/K)`; server alpha = `--lg`
  = {{algorithms.fed_swa.FEDSWA_PRESETS.code.alpha}} (L1378). FedMoSWA (`--alg MoFedSWA`
  dispatches `update_scafplus`, L957-1005): a constant in-round rate (rho =
  {{algorithms.fed_swa.FEDMOSWA_PRESETS.code.rho}}: `S_i = K_i eta_t`; L996 divides by the step
  cap `--K` times `eta_t`, the same when every client runs its K steps), s =
  {{algorithms.fed_swa.FEDMOSWA_PRESETS.code.peak}}, server alpha =
  {{algorithms.fed_swa.FEDMOSWA_PRESETS.code.alpha}} (L1419), gamma =
  {{algorithms.fed_swa.FEDMOSWA_PRESETS.code.gamma}} hard-coded (L1408; `--gamma` is unused)
  and gamma = 1 in the first round (m = mean c^+, L1399-1402). Setting rho with 'code' gives
  the code's rule with that schedule, which the code itself never runs.

**Not reproduced from the code, by decision:**

- FedMoSWA's control variates keyed by worker slot. In the HEAD code `c_i` is an attribute of
  the Ray actor (a cohort slot): it is saved to `c_dict[index]` (L1003-1004) but read back from
  `ci_dict` (L478-481), which is never written, so each slot reuses the `c^+` of whichever
  client it served last; the ICML release reloads it only when a client returns to the same
  actor (L1938-1944). The paper's `c_i`, the code's evident intent and the engine's client table
  are per client id; both variants key `c_i` by client id (spec B.2/B.6 item 6).
- The round learning-rate schedule (HEAD: cosine over the rounds, L1796-1800; ICML: x0.998 per
  round, L3301) is `config.local.lr_decay`'s, not the algorithm's.
- The ICML release's FedMoSWA (`FedSWAS`) divides by `K eta_t (1 + rho)/2` (L2218-2222) rather
  than `S_m`; the [H-SWA] code runs a step cap `--K` (the config's `local.steps` here);
  BatchNorm buffers inside the deltas do not arise (the library's models keep no running
  statistics).
"""

_FED_WMSAM = r"""
**Sources.** Code: `Huang-Yongzhi/NeurlPS_FedWMSAM` @ a922a1d5c485e446722c6e82a845f3e77f22f3a4:
`client/fedwmsam.py` L9-46 (loss `alpha CE + (1-alpha) <w, m_k>`, its gradient `(1-alpha) m_k`
exactly; clip L36, SGD L19/L37, `target_model += momentum_list` L38), `optimizer/WMSAM.py`
L26-75 (perturbation, restore; `rho / (grad_norm + eps)` with eps =
{{algorithms.fed_wmsam.PERTURBATION_EPS}} at L40), `server/FedWMSAM.py` L32-45 (`m_k`), L47-65
(alpha, c, Delta, x; the bounds of the mean value at L49), L67-84 (value, `c_k`),
`server/server.py` L79-80 and L195-224 (the round, lr decay after the server update),
`train.py` (its defaults: rho 0.1; `alpha` ({{alpha}}) and `weight_decay` ({{weight_decay}}) as
here; lr 0.1, lr_decay 0.998, global lr 1, 5 epochs, batch 50).

Paper: arXiv:2511.22080 (OpenReview 75JiIa0fU1); arXiv's page gives the abstract and
introduction only, but the whole camera-ready text could be read from a markdown copy in a
public repository (its equations 1 and 3-5 were not legible there). Algorithm 1 (sec. 4.2): the
client rule with the 'paper' sign (`delta = (x^r + b m_k) - x_b`, gradient at
`x_b + rho delta/||delta||`, `v = alpha_r g + (1 - alpha_r) m_k`, `x_{b+1} = x_b - eta_l v`),
`alpha_0 = 0.1`, alpha kept in [0.1, 0.9) and smoothed with lambda (0.01 in its appendix B),
`c_k` and `c` updated "SCAFFOLD-inspired"; sec. 4.2.3 computes alpha from the similarity of the
global momentum and each client's personalized momentum (the code: `cos(Delta_k, Delta) + 1`;
the paper's formula was not legible). Sec. 5.1: 100 clients, 10% per round, batch 50,
`eta_l` 0.1, `eta_g` 1, 5 local epochs, 500 rounds, Dir(0.1) by default; an MLP on
Fashion-MNIST, ResNet-18 on CIFAR-10, ResNet-34 on CIFAR-100; a SAM radius of 0.01 for FedWMSAM
(and FedSAM, FedGAMMA, FedLESAM; 0.1 for FedSMOO and MoFedSAM). No weight decay, gradient
clipping or learning-rate decay is mentioned. The paper's radius is the default here, `rho`
({{rho}}); the code's is `rho=0.1`.

**Paper vs code** (`variant`): the paper and its poster perturb along `+rho delta/||delta||`
('paper', the default). The code (WMSAM.py L26-54) indexes the flat vector `delta` with the
index of each parameter tensor, so tensor i (of P) is shifted by the one scalar
`-rho d_i / (sum_{j<P} |d_j| + eps)`, `d` the flattened `delta` ('code_exact'; the flat order
here is the pytree's leaf order, each leaf row-major, not PyTorch's parameter order, so the P
entries read differ from the authors' model); 'code_intended' is `-rho delta/(||delta||+eps)`,
the code's sign without the indexing bug. As `m_k` has a gradient's sign, `t_b` runs ahead
uphill and the paper's sign perturbs uphill (SAM-like). Other differences, where the library
follows the code: Algorithm 1 (and the poster's motivation panel) writes
`x_{r+1} = x_r - eta_g Delta_{r+1}` with `Delta_{r+1} = sum Delta_k / (eta_l |P_r|)` (the code:
plain averaging, Delta divided by K and scaled by `momentum_decay` ({{momentum_decay}},
hard-coded there)); the poster's alpha-hat is
the mean cosine (the code adds 1, and lambda is hard-coded); the poster's global control is
`c + sum Delta_k / (eta B |P_r|)` (the code: SCAFFOLD's `(1/M) sum (c_k^+ - c_k)`). Gradient
clipping (`max_grad_norm`, {{max_grad_norm}}) and the weight decay are the code's, in neither
the paper nor the poster; here they are this algorithm's own defaults (`local.weight_decay` and
`local.momentum` are not used).

**Where the library differs from the code.** The round's client learning rate `eta_r` is
`local.lr * local.lr_decay**r` (0.998 in the authors' code). `mean_k value_k` is uniform over
the cohort (the code's `np.mean`); `p_k` are the engine's weights (uniform in the code,
`torch.mean`; `aggregation='auto'` gives 'uniform' here). `K_k` is the client's real step count
(the code: `local_epochs * n_0 / B` from client 0's size, the same when clients are equal).
Clipping is torch's `clip_grad_norm_`, the code's (`core.optimizers.clip_by_global_norm`:
`G max / (||G|| + eps)` above the bound, eps = {{core.optimizers.CLIP_EPS}}). Cohorts are the
engine's (fixed size, uniform without replacement); the code draws each client with probability
`active_ratio` (`server.py` L66-76), so its cohort size varies. The reduction to FedCM follows
the authors' `client/fedcm.py` and `server/FedCM.py` (client loss
`alpha CE + (1-alpha)<w, Delta>`, momentum `mean(x^r - x_K)/(K eta)`).

**What a run would have to reproduce** (the paper's Table 1, "after 500 rounds", test accuracy;
the code prints the maximum over rounds; the settings of sec. 5.1): Fashion-MNIST (MLP) Dir 0.6
/ Dir 0.1: 0.8756 / 0.8464 (FedAvg 0.8684 / 0.8226, FedSAM 0.8683 / 0.8261, FedSMOO 0.8846 /
0.8337); CIFAR-10 (ResNet-18) Dir 0.6 / Dir 0.1 / Path 6 / Path 3: 0.8356 / 0.7664 / 0.8443 /
0.7446 (FedAvg 0.7886 / 0.7005 / 0.7873 / 0.6426); CIFAR-100 (ResNet-34) Dir 0.6 / Dir 0.1 /
Path 20 / Path 10: 0.4908 / 0.4646 / 0.4786 / 0.4383 (FedAvg 0.3917 / 0.3815 / 0.3968 /
0.3631). Table 6 (CIFAR-10 Dir 0.1), over the radius 0.005 / 0.01 / 0.05 / 0.1 / 0.5: 0.7659 /
0.7664 / 0.7563 / 0.7244 / 0.5905. Not reproduced here (the paper's normalisation layers are not
stated).
"""

_MINIMAX = r"""
The papers average the clients uniformly, `1/m`; here `p_i` are the engine's weights (by
examples, equal on equal clients).
"""

NOTES: dict[str, str] = {
    "dp_fedsam": _DP_FEDSAM,
    "fedgf": _FED_GF,
    "fedgloss": _FED_GLOSS,
    "naive_fedgloss": _FED_GLOSS,
    "fedgmt": _FED_GMT,
    "fedgmt_v2": _FED_GMT,
    "fednsam": _FED_NSAM,
    "fedswa": _FED_SWA,
    "fedmoswa": _FED_SWA,
    "fedwmsam": _FED_WMSAM,
    "fess_gda": _MINIMAX,
    "local_sgda": _MINIMAX + "\nLocal SGDA: Deng & Mahdavi; Sharma et al.\n",
    "local_sgda_plus": _MINIMAX + (
        "\nThe snapshot `x~` is refreshed every `snapshot_every` ({{snapshot_every}}) rounds: "
        "rounds, not local iterations, is our reading of the papers.\n"),
    "fed_norm_sgda": _MINIMAX + "\nFedNorm-SGDA: Sharma et al. 2023.\n",
    "fed_norm_sgda_plus": _MINIMAX + (
        "\nFedNorm-SGDA (Sharma et al. 2023) with Local SGDA+'s snapshot, refreshed every "
        "`snapshot_every` ({{snapshot_every}}) rounds: rounds, not local iterations, is our "
        "reading of the papers.\n"),
}
