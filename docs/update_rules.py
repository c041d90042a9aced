"""The "Update rule" section of every algorithm's docs page, as rendered math.

`docs/gen_algorithm_pages.py` inserts `RULES[name]` under "## Update rule" of
`docs/algorithms/<name>.md`; the module docstring (plain text: the rule's symbols as the code
names them, the tested reductions) follows under "## Notes", and `docs/algorithm_notes.py` (the
sources, paper vs code) under "## Sources and notes". Each entry is Markdown with TeX for
pymdownx.arithmatex in generic mode, rendered by the vendored KaTeX: inline math `$...$` (no
space just inside the dollars), display math in `$$` blocks on lines of their own with a blank
line before and after, KaTeX-supported macros only (tests/test_docs.py renders every formula
with `throwOnError`).

The entries follow the code, in the order it applies the steps (client step, what the client
keeps and uploads, server step), with the module docstrings' symbols; an option appears only
where it changes a formula. Edit a rule together with the algorithm's code.
"""

RULES: dict[str, str] = {
    # ---------------------------------------------------------------- FedAvg family (fed_avg.py)
    "fedavg": r"""
Round $t$: each sampled client $m \in N_t$ starts from the broadcast $w_{m,0} = w^t$ with a fresh
local optimiser state and takes $K_m$ steps on minibatches $\xi$ of its data:

$$
w_{m,k+1} = w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k}; \xi)\big),
\qquad k = 0, \dots, K_m - 1
$$

It keeps nothing and uploads $\Delta_m = w^t - w_{m,K_m}$. The server takes one step of its
optimiser (`config.server`) from $w^t$, with the pseudo-gradient as the gradient:

$$
\Delta = \sum_{m \in N_t} p_m \Delta_m, \qquad w^{t+1} = \mathrm{ServerOpt}(w^t; \Delta)
$$

$f_m$: the masked cross-entropy, a mean over the batch's real examples (or loss tokens).
$K_m = E \lceil n_m / B \rceil$, or `local.steps`. $\eta_t$: the round's client learning rate
(`local.lr` decayed by `local.lr_decay` once per round). $p_m$: the aggregation weights,
$n_m / \sum_{j \in N_t} n_j$ (or uniform), summing to 1. $\mathrm{opt}(d)$: the local
optimiser's update for the input $d$; the default SGD with momentum $\mu$ and weight decay
$\lambda$ keeps a buffer $b \leftarrow \mu b + d + \lambda w_{m,k}$ (0 at the start of every
round) and returns $b$. The default server `sgd` with lr 1 gives
$w^{t+1} = \sum_m p_m w_{m,K_m}$ (FedAvg); lr $\eta_g$ gives $w^{t+1} = w^t - \eta_g \Delta$;
`adam`, `yogi`, `adagrad` are FedOpt.
""",
    "fedsam": r"""
[FedAvg](fedavg.md) with the SAM client optimiser: on each batch $\xi$ (the same batch and
augmentation for both passes) client $m$ ascends to $w_{m,k} + e$ and steps with the gradient
there, from the unperturbed weights (momentum and weight decay see $w_{m,k}$):

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad e = \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi)\big)
\end{aligned}
$$

$\lVert \cdot \rVert$ is one global L2 norm over the parameter pytree; $\rho$ = `rho` ({{rho}}).
Upload $\Delta_m = w^t - w_{m,K_m}$ and server as FedAvg:
$w^{t+1} = \mathrm{ServerOpt}\big(w^t; \sum_{m \in N_t} p_m \Delta_m\big)$. $\rho = 0$ is FedAvg
exactly. $\eta_t$, $p_m$, $\mathrm{opt}$, $\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md).
""",
    "fedasam": r"""
[FedAvg](fedavg.md) with the ASAM client optimiser: the SAM ascent is rescaled elementwise by
$T = \lvert w_{m,k} \rvert + \eta$ ($T = 1$ on biases), on the same batch $\xi$ for both passes:

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad
e = \rho\, \frac{T \odot T \odot g}{\lVert T \odot g \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi)\big)
\end{aligned}
$$

$\odot$: elementwise product; $\lVert \cdot \rVert$: one global L2 norm over the pytree (biases
included). $\rho$ = `rho` ({{rho}}), $\eta$ = `eta` ({{eta}}; not the learning rate $\eta_t$). Upload
$\Delta_m = w^t - w_{m,K_m}$ and server as FedAvg:
$w^{t+1} = \mathrm{ServerOpt}\big(w^t; \sum_{m \in N_t} p_m \Delta_m\big)$. $\eta_t$, $p_m$,
$\mathrm{opt}$, $\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md).
""",
    "dp_fedsam": r"""
[FedASAM](fedasam.md) (or [FedSAM](fedsam.md) with `adaptive=False`) whose uploads are clipped
and noised ([client-level differential privacy](../privacy.md)). On each batch $\xi$ client $m$
takes the ASAM step with $T = \lvert w_{m,k} \rvert$ on every tensor, biases included (the
authors' code):

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad
e = \rho\, \frac{w_{m,k} \odot w_{m,k} \odot g}{\lVert \lvert w_{m,k} \rvert \odot g \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi)\big)
\end{aligned}
$$

($e = \rho\, g / (\lVert g \rVert + {{$core.tree.NORM_EPS}})$ with `adaptive=False`). After $K_m$ steps it
clips every tensor $l$ of $\Delta_m = w^t - w_{m,K_m}$ and adds its own noise:

$$
\tilde\Delta_{m,l} = \Delta_{m,l} \min\Big(1, \frac{C}{\lVert \Delta_{m,l} \rVert}\Big)
+ z_{m,l}, \qquad z_{m,l} \sim \mathcal{N}\Big(0, \frac{\sigma^2 C^2}{m} I\Big)
$$

and uploads $\tilde\Delta_m$. The server averages uniformly: $w^{t+1} = w^t - \frac{1}{m}
\sum_{m' \in N_t} \tilde\Delta_{m'}$.

$m = \lvert N_t \rvert$ (`clients_per_round`); $C$ = `clip_norm` ({{clip_norm}}), $\sigma$ =
`noise_multiplier` ({{noise_multiplier}}), $\rho$ = `rho` ({{rho}}); `clip='global'` clips $\Delta_m$ as one vector,
`noise='server'` adds one $z \sim \mathcal{N}(0, \sigma^2 C^2 I)$ to the sum instead.
$\mathrm{opt}$: SGD with momentum `momentum` ({{momentum}}) and weight decay `weight_decay` ({{weight_decay}}) (the code's), reset
every round.
""",
    # ------------------------------------------------------------------------------- fed_prox.py
    "fedprox": r"""
Client $m$ starts from $w_{m,0} = w^t$ with a fresh optimiser, keeps $w^t$ as the proximal
centre and takes $K_m$ steps on $f_m(w) + \frac{\mu}{2} \lVert w - w^t \rVert^2$:

$$
w_{m,k+1} = w_{m,k}
- \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k}; \xi) + \mu\, (w_{m,k} - w^t)\big)
$$

It uploads $\Delta_m = w^t - w_{m,K_m}$; the server is FedAvg's (FedOpt with `config.server`):

$$
w^{t+1} = \mathrm{ServerOpt}\Big(w^t; \sum_{m \in N_t} p_m \Delta_m\Big)
$$

$\mu$ = `mu` ({{mu}}); $\mu = 0$ is FedAvg exactly. $\eta_t$, $p_m$, $\mathrm{opt}$,
$\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------- scaffold.py
    "scaffold": r"""
Server state: $w^t$ and the global control $c$; each client keeps its control $c_m$ in the
client table (all 0 at start). Client $m \in N_t$ receives $(w^t, c)$, starts from
$w_{m,0} = w^t$ with a fresh optimiser, takes $K_m$ corrected steps, then updates its control
(option II):

$$
\begin{aligned}
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k}; \xi) - c_m + c\big)\\
c_m^+ &= c_m - c + \frac{w^t - w_{m,K_m}}{K_m\, \eta_t}
\end{aligned}
$$

It keeps $c_m^+$ and uploads $(w^t - w_{m,K_m},\ c_m^+ - c_m)$. The server ($M$: all clients)
steps its optimiser on the weighted model update and adds the cohort's summed control updates
divided by $M$:

$$
\begin{aligned}
w^{t+1} &= \mathrm{ServerOpt}\Big(w^t; \sum_{m \in N_t} p_m (w^t - w_{m,K_m})\Big)\\
c &\leftarrow c + \frac{1}{M} \sum_{m \in N_t} (c_m^+ - c_m)
\end{aligned}
$$

$\eta_t$, $p_m$, $\mathrm{opt}$, $\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md); weight decay in
$\mathrm{opt}$ is part of the local update, so the control absorbs it. Client momentum:
`config.algorithm.scaffold.momentum` (0, the paper's), not `local.momentum`.
""",
    "fedgamma": r"""
[SCAFFOLD](scaffold.md) with a SAM client optimiser. Server: $w^t$ and the global control $c$;
client table: $c_m$ (all 0 at start). Client $m \in N_t$ receives $(w^t, c)$, starts from
$w_{m,0} = w^t$ with a fresh optimiser, perturbs with its raw local gradient and descends along
the corrected SAM gradient (same batch $\xi$ for both passes):

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad e = \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi) - c_m + c\big)\\
c_m^+ &= c_m - c + \frac{w^t - w_{m,K_m}}{K_m\, \eta_t}
\end{aligned}
$$

It keeps $c_m^+$ and uploads $(w^t - w_{m,K_m},\ c_m^+ - c_m)$. Server ($M$: all clients):

$$
\begin{aligned}
w^{t+1} &= \mathrm{ServerOpt}\Big(w^t; \sum_{m \in N_t} p_m (w^t - w_{m,K_m})\Big)\\
c &\leftarrow c + \frac{1}{M} \sum_{m \in N_t} (c_m^+ - c_m)
\end{aligned}
$$

$\rho$ = `rho` ({{rho}}); $\rho = 0$ is SCAFFOLD. Client momentum: `momentum` ({{momentum}}). $\eta_t$, $p_m$,
$\mathrm{opt}$, $\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md).
""",
    # --------------------------------------------------------------------------------- fed_cm.py
    "fedcm": r"""
Server state: $w^r$ and the global momentum $\Delta^r$ in gradient units ($\Delta^0 = 0$), both
sent down. Client $i$ starts from $w_{i,0} = w^r$ with a fresh optimiser and on each batch $\xi$
mixes its gradient with the momentum:

$$
v = \beta\, \nabla f_i(w_{i,k}; \xi) + (1 - \beta)\, \Delta^r,
\qquad w_{i,k+1} = w_{i,k} - \eta_l\, \mathrm{opt}(v)
$$

It keeps nothing and uploads $w^r - w_{i,K_i}$ (with its step count $K_i$). Server:

$$
\begin{aligned}
\Delta^{r+1} &= \sum_i p_i\, \frac{w^r - w_{i,K_i}}{\eta_l K_i}\\
w^{r+1} &= w^r - s \sum_i p_i\, (w^r - w_{i,K_i})
\end{aligned}
$$

$\eta_l$: the client learning rate of round $r$; $\beta$ = `beta` ({{beta}}); $s$ =
`server_lr_relative` ({{server_lr_relative}}: the model average). This is $w^{r+1} = w^r - \eta_g \Delta^{r+1}$ with
$\eta_g = s\, \eta_l K_i$ client by client. $\beta = 1$ is FedAvg exactly. Client momentum:
`momentum` ({{momentum}}). $p_i$, $\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    "mofedsam": r"""
[FedCM](fedcm.md) with a SAM client optimiser. Server state: $w^r$ and the global momentum
$\Delta^r$ in gradient units ($\Delta^0 = 0$), both sent down. Client $i$ starts from
$w_{i,0} = w^r$ with a fresh optimiser; on each batch $\xi$ (same batch for both passes):

$$
\begin{aligned}
g &= \nabla f_i(w_{i,k}; \xi), \qquad e = \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
v &= \beta\, \nabla f_i(w_{i,k} + e; \xi) + (1 - \beta)\, \Delta^r,
\qquad w_{i,k+1} = w_{i,k} - \eta_l\, \mathrm{opt}(v)
\end{aligned}
$$

It uploads $w^r - w_{i,K_i}$ (with $K_i$). Server:

$$
\begin{aligned}
\Delta^{r+1} &= \sum_i p_i\, \frac{w^r - w_{i,K_i}}{\eta_l K_i}\\
w^{r+1} &= w^r - s \sum_i p_i\, (w^r - w_{i,K_i})
\end{aligned}
$$

$\eta_l$: the client learning rate of round $r$; $\rho$ = `rho` ({{rho}}); $\beta$ = `beta` ({{beta}});
$s$ = `server_lr_relative` ({{server_lr_relative}}: the model average, i.e. $\eta_g = s\, \eta_l K_i$ in
$w^{r+1} = w^r - \eta_g \Delta^{r+1}$). $\beta = 1$ is FedSAM exactly. Client momentum:
`momentum` ({{momentum}}). $p_i$, $\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------ mime_lite.py
    "mimelite": r"""
Server state: $x^t$ and the momentum $m$ (0 at start), both sent down. Client $i$ starts from
$y_0 = x^t$ with a fresh optimiser (client momentum 0). On each batch $\xi$ it steps with the
frozen server momentum and, during its first epoch, accumulates the gradient at $x^t$ ($G_i = 0$
at start; $n_\xi$ the batch's real examples):

$$
\begin{aligned}
y_{k+1} &= y_k - \eta_t\, \mathrm{opt}\big((1 - \beta)\, \nabla f_i(y_k; \xi) + \beta m\big)\\
G_i &\leftarrow G_i + n_\xi\, \nabla f_i(x^t; \xi), \qquad N_i \leftarrow N_i + n_\xi
\end{aligned}
$$

It uploads $\big(x^t - y_{K},\ \nabla f_i(x^t) = G_i / N_i\big)$, the full-batch gradient at the
server model (over the examples seen when `local.steps` is under one epoch). Server:

$$
\begin{aligned}
x^{t+1} &= \mathrm{ServerOpt}\Big(x^t; \sum_i p_i\, (x^t - y_{i,K})\Big)\\
m &\leftarrow (1 - \beta) \sum_i p_i\, \nabla f_i(x^t) + \beta m
\end{aligned}
$$

$\beta$ = `beta` ({{beta}}). $\eta_t$, $p_i$, $\mathrm{opt}$, $\mathrm{ServerOpt}$ (plain average by
default): as for [FedAvg](fedavg.md).
""",
    # -------------------------------------------------------------------------------- fed_ntd.py
    "fedntd": r"""
Client $m$ starts from $w_{m,0} = w^t$ with a fresh optimiser and keeps $w^t$ frozen as the
teacher. Its loss on a batch $\xi = (x, y)$ adds the not-true distillation to the cross-entropy:

$$
\begin{aligned}
\ell_m(w; \xi) &= \mathrm{CE}\big(f(w; x), y\big) + \beta \tau^2 \operatorname{KL}\Big(
\tilde q\big(f(w^t; x) / \tau\big) \,\Big\Vert\, \tilde q\big(f(w; x) / \tau\big)\Big)\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla \ell_m(w_{m,k}; \xi)\big)
\end{aligned}
$$

$\tilde q$: the softmax over the not-true classes only (the true class's logit removed); the KL
is a mean over the batch's real examples (or loss tokens). One extra forward pass of the
teacher, no extra backward. Upload $\Delta_m = w^t - w_{m,K_m}$; server as FedAvg:
$w^{t+1} = \mathrm{ServerOpt}\big(w^t; \sum_{m \in N_t} p_m \Delta_m\big)$. $\beta$ = `beta` ({{beta}}),
$\tau$ = `tau` ({{tau}}); $\beta = 0$ is FedAvg exactly. $\eta_t$, $p_m$, $\mathrm{opt}$,
$\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md).
""",
    # -------------------------------------------------------------------------------- fed_dyn.py
    "feddyn": r"""
Each client keeps a dual $h_m$, the server $w^t$ and $h$ (all 0 at start). Client $m \in N_t$
starts from $w_{m,0} = w^t$ with a fresh optimiser, descends on
$f_m(w) - \langle h_m, w \rangle + R(w - w^t)$, then updates its dual:

$$
\begin{aligned}
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k}; \xi) - h_m
+ \nabla R(w_{m,k} - w^t)\big)\\
h_m &\leftarrow h_m - \alpha\, (w_{m,K_m} - w^t)
\end{aligned}
$$

It uploads $\Delta_m = w_{m,K_m} - w^t$. Server ($M$: all clients):

$$
\begin{aligned}
h &\leftarrow h - \frac{\alpha}{M} \sum_{m \in N_t} \Delta_m\\
w^{t+1} &= w^t + \sum_{m \in N_t} p_m \Delta_m - \frac{h}{\alpha}
\end{aligned}
$$

$\alpha$ = `alpha` ({{alpha}}). `prox='squared'` (the paper, default):
$R(v) = \frac{\alpha}{2} \lVert v \rVert^2$, $\nabla R(v) = \alpha v$; `'unsquared'` (the FedGMT
authors' code): $\nabla R(v) = \frac{\alpha}{2}\, v / (\lVert v \rVert + {{$core.tree.NORM_EPS}})$; `'none'`:
$R = 0$. The paper's uniform cohort average is `aggregation='uniform'`. $\eta_t$, $p_m$,
$\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    "feddyn_sam": r"""
[FedDyn](feddyn.md) with the SAM client optimiser: the cross-entropy gradient is taken at the
perturbed weights, the dual and proximal terms at $w_{m,k}$. Client $m \in N_t$ keeps $h_m$ (0 at
start) and starts from $w_{m,0} = w^t$ with a fresh optimiser; on each batch $\xi$:

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad e = \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi) - h_m
+ \nabla R(w_{m,k} - w^t)\big)\\
h_m &\leftarrow h_m - \alpha\, (w_{m,K_m} - w^t) \quad (\text{after the } K_m \text{ steps})
\end{aligned}
$$

It uploads $\Delta_m = w_{m,K_m} - w^t$. Server ($M$: all clients), FedDyn's:

$$
h \leftarrow h - \frac{\alpha}{M} \sum_{m \in N_t} \Delta_m,
\qquad w^{t+1} = w^t + \sum_{m \in N_t} p_m \Delta_m - \frac{h}{\alpha}
$$

$\rho$ = `rho` ({{rho}}), $\alpha$ = `alpha` ({{alpha}}); $\rho = 0$ is FedDyn exactly. $R$ as set by
`prox` (default $\frac{\alpha}{2} \lVert v \rVert^2$, see FedDyn). $\eta_t$, $p_m$,
$\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------ fed_speed.py
    "fedspeed": r"""
Client $i$ keeps the prox-correction $\hat g_i$ (0 at start) and starts from $x_{i,0} = x^t$ with
a fresh optimiser. On each batch $\xi$ (same batch for both passes) it mixes the gradient with
the gradient after an ascent step into a quasi-gradient:

$$
\begin{aligned}
g_1 &= \nabla f_i(x_{i,k}; \xi), \qquad g_2 = \nabla f_i(x_{i,k} + \rho\, g_1; \xi),
\qquad \tilde g = (1 - \alpha)\, g_1 + \alpha\, g_2\\
x_{i,k+1} &= x_{i,k} - \eta_t\, \mathrm{opt}\Big(\tilde g - \hat g_i
+ \tfrac{1}{\lambda}\, (x_{i,k} - x^t)\Big)\\
\hat g_i &\leftarrow \hat g_i - \tfrac{1}{\lambda}\, (x_{i,K} - x^t)
\quad (\text{after the } K \text{ steps})
\end{aligned}
$$

Server, `variant='paper'` (`dual_average='active'`): each client uploads
$x_{i,K} - \lambda \hat g_i - x^t$ (one model) and
$x^{t+1} = \sum_i p_i\, (x_{i,K} - \lambda \hat g_i)$.
`variant='code'`: $\alpha = 1$, the normalised ascent
$x_{i,k} + \rho\, g_1 / (\lVert g_1 \rVert + {{$core.tree.NORM_EPS}})$ and FedDyn's server: upload
$x_{i,K} - x^t$, $h \leftarrow h - \frac{1}{\lambda M} \sum_{i \in N_t} (x_{i,K} - x^t)$,
$x^{t+1} = \sum_i p_i\, x_{i,K} - \lambda h$ ($M$: all clients). Defaults: $\lambda$ = `lam`
({{lam}}), $\rho$ = `rho` ({{rho}}), $\alpha$ = {{algorithms.fed_speed.VARIANTS.paper.alpha}} ('paper'); `prox='unsquared'`: the proximal
gradient of [FedDyn](feddyn.md) with $\alpha_{\mathrm{dyn}} = 1/\lambda$. $\eta_t$, $p_i$,
$\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------- fed_smoo.py
    "fedsmoo": r"""
Client $m$ keeps the FedDyn dual $h_m$ and the perturbation dual $\mu_m$; the server keeps $w^t$,
$h$ and the global perturbation $s$ (all 0 at start) and sends $(w^t, s)$. Client $m$ starts from
$w_{m,0} = w^t$ with a fresh optimiser; on each batch $\xi$ (same batch for both passes):

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad
e = \rho\, \frac{g - \mu_m - s}{\lVert g - \mu_m - s \rVert + {{$core.tree.NORM_EPS}}},
\qquad \mu_m \leftarrow \mu_m + (e - s)\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi) - h_m
+ \nabla R(w_{m,k} - w^t)\big)
\end{aligned}
$$

After $K_m$ steps $h_m \leftarrow h_m - \alpha\, (w_{m,K_m} - w^t)$; it keeps $h_m$, $\mu_m$ and
uploads $\Delta_m = w_{m,K_m} - w^t$ and $s_m = \mu_m - e_{K_m}$ (the last step's $e$). Server
($M$: all clients), FedDyn's model step, then the new $s$:

$$
\begin{aligned}
h &\leftarrow h - \frac{\alpha}{M} \sum_{m \in N_t} \Delta_m,
\qquad w^{t+1} = w^t + \sum_{m \in N_t} p_m \Delta_m - \frac{h}{\alpha}\\
s &= \rho\, \frac{\sum_m p_m s_m}{\lVert \sum_m p_m s_m \rVert + {{$core.tree.NORM_EPS}}}
\end{aligned}
$$

$\alpha$ = `alpha` ({{alpha}}), $\rho$ = `rho` ({{rho}}), $R(v) = \frac{\alpha}{2} \lVert v \rVert^2$
(`prox` as for [FedDyn](feddyn.md)). `s_update='mu'` uploads $s_m = \mu_m$ (the authors' code);
`dual_average='active'` uploads $\Delta_m - h_m / \alpha$ (new $h_m$) and sets
$w^{t+1} = w^t + \sum_m p_m (\Delta_m - h_m / \alpha)$. $\eta_t$, $p_m$, $\mathrm{opt}$: as for
[FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------ fed_lesam.py
    "fedlesam": r"""
Client $m$ keeps $w_{\mathrm{old}}$, the global model it received at its previous participation.
Round $t$: it starts from $w_{m,0} = w^t$ with a fresh optimiser and uses one perturbation for
the whole round, with no extra backward pass:

$$
\begin{aligned}
e &= \rho\, \frac{w_{\mathrm{old}} - w^t}{\lVert w_{\mathrm{old}} - w^t \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi)\big)
\end{aligned}
$$

Then $w_{\mathrm{old}} \leftarrow w^t$, and it uploads $\Delta_m = w_{m,K_m} - w^t$. Server (plain
average, no server optimiser):

$$
w^{t+1} = w^t + \sum_{m \in N_t} p_m \Delta_m
$$

$e = 0$ at a client's first participation (`first_participation='zero'`; `'w0'` starts
$w_{\mathrm{old}} = w^0$). `perturbation='broadcast'` replaces $w_{\mathrm{old}} - w^t$ by the
server's last change $w^{t-1} - w^t$, sent down with $w^t$ ($e = 0$ in round 0). $\rho$ = `rho`
({{rho}}). $\eta_t$, $p_m$, $\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    "fedlesam_d": r"""
[FedLESAM](fedlesam.md) plus FedDyn's dual and proximal terms (at the unperturbed weights) and
FedDyn's server. Client $m$ keeps $w_{\mathrm{old}}$ (the global model of its previous
participation) and $h_m$ (0 at start); from $w_{m,0} = w^t$ with a fresh optimiser:

$$
\begin{aligned}
e &= \rho\, \frac{w_{\mathrm{old}} - w^t}{\lVert w_{\mathrm{old}} - w^t \rVert + {{$core.tree.NORM_EPS}}}\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_{m,k} + e; \xi) - h_m
+ \nabla R(w_{m,k} - w^t)\big)
\end{aligned}
$$

Then $h_m \leftarrow h_m - \alpha\, (w_{m,K_m} - w^t)$, $w_{\mathrm{old}} \leftarrow w^t$, and it
uploads $\Delta_m = w_{m,K_m} - w^t$. Server ($M$: all clients):

$$
h \leftarrow h - \frac{\alpha}{M} \sum_{m \in N_t} \Delta_m,
\qquad w^{t+1} = w^t + \sum_{m \in N_t} p_m \Delta_m - \frac{h}{\alpha}
$$

$\rho$ = `rho` ({{rho}}), $\alpha$ = `alpha` ({{alpha}}), $R(v) = \frac{\alpha}{2} \lVert v \rVert^2$
(`prox`, as for FedDyn). $e = 0$ at a first participation (`first_participation`);
`perturbation='broadcast'` uses $w^{t-1} - w^t$ instead. $\eta_t$, $p_m$, $\mathrm{opt}$: as for
[FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------ fed_gloss.py
    "fedgloss": r"""
Server state: $w$, the previous pseudo-gradient $\tilde D$ (none in round 0) and the global dual
$\sigma$; client $k$ keeps its dual $\sigma_k$ (duals 0 at start). Round $t$: the server takes
the ascent step itself ($\tilde w = w$ in round 0) and sends $\tilde w$; client $k \in S_t$
starts from $w_k = \tilde w$ with a fresh optimiser, takes its steps with the ADMM-corrected
gradient, then updates its dual and uploads $w_k - \tilde w$:

$$
\begin{aligned}
\tilde w &= w + \rho_s(t)\, \frac{\tilde D}{\lVert \tilde D \rVert + {{$core.tree.NORM_EPS}}}\\
w_k &\leftarrow w_k - \eta_t\, \mathrm{opt}\Big(g - \sigma_k + \frac{w_k - \tilde w}{\beta}\Big),
\qquad \sigma_k \leftarrow \sigma_k - \frac{w_k - \tilde w}{\beta}
\end{aligned}
$$

Server ($M$: all clients), descending from the unperturbed $w$:

$$
\begin{aligned}
\sigma &\leftarrow \sigma - \frac{1}{\beta M} \sum_{k \in S_t} (w_k - \tilde w),
\qquad \tilde D = \sum_{k \in S_t} p_k\, (\tilde w - w_k)\\
w &\leftarrow w - \eta_s \tilde D - \beta \sigma
\end{aligned}
$$

$g$: the gradient of `client_optimizer` (`'sgd'`; `'sam'`/`'asam'` at radius $\rho_l(t)$).
$\rho_s(t)$, $\rho_l(t)$ reach `rho`, `rho_l` ({{rho_l}} each) by a linear ramp from `rho0` over
`ramp_rounds` ({{ramp_rounds}}: constant). $\beta$ = `beta` ({{beta}}), $\eta_s$ = `eta_s` ({{eta_s}}). `admm=False` drops
the $\sigma$ and $\beta$ terms; `dual_scale='code'` divides the dual's sum by
$\beta M \lvert S_t \rvert$. $\eta_t$, $p_k$, $\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    "naive_fedgloss": r"""
[FedGloSS](fedgloss.md) with the current round's pseudo-gradient as the ascent direction, at the
price of two exchanges with the same cohort $S_t$ per round. Server state: $w$ and $\sigma$;
client duals $\sigma_k$ (all 0 at start).

Exchange 0 (probe): the server sends $w$; each client $k$ starts from $w_k = w$ and takes the
FedGloSS local step anchored at $w$ (no dual update); the server keeps $w$ and $\sigma$ and only
forms $D = \sum_{k \in S_t} p_k\, (w - w_k)$.

Exchange 1: the server sends $\tilde w$; clients start from $w_k = \tilde w$ and run the FedGloSS
round:

$$
\begin{aligned}
\tilde w &= w + \rho_s(t)\, \frac{D}{\lVert D \rVert + {{$core.tree.NORM_EPS}}}\\
w_k &\leftarrow w_k - \eta_t\, \mathrm{opt}\Big(g - \sigma_k + \frac{w_k - \tilde w}{\beta}\Big),
\qquad \sigma_k \leftarrow \sigma_k - \frac{w_k - \tilde w}{\beta}\\
\sigma &\leftarrow \sigma - \frac{1}{\beta M} \sum_{k \in S_t} (w_k - \tilde w),
\qquad \tilde D = \sum_{k \in S_t} p_k\, (\tilde w - w_k)\\
w &\leftarrow w - \eta_s \tilde D - \beta \sigma
\end{aligned}
$$

Clients upload $w_k - w$ (exchange 0) and $w_k - \tilde w$ (exchange 1). $g$, $\rho_s(t)$,
$\beta$ = `beta` ({{beta}}), $\eta_s$ = `eta_s` ({{eta_s}}), $M$ and the options: as for FedGloSS.
$\eta_t$, $p_k$, $\mathrm{opt}$: as for [FedAvg](fedavg.md).
""",
    # -------------------------------------------------------------------------------- fed_gmt.py
    "fedgmt": r"""
Server state: $w^t$, the EMA model $e^t$ ($e^0 = w^0$) and the global dual $u$; client $m$ keeps
its dual $u_m$ (duals 0 at start). Client $m \in N_t$ receives $(w^t, e^t)$ and starts from
$w_{m,0} = w^t$ with a fresh optimiser; $e^t$ is a frozen teacher:

$$
\begin{aligned}
L_m(w; \xi) &= \mathrm{CE}\big(f(w; x), y\big) + \gamma \tau^2 \operatorname{KL}\Big(
\mathrm{softmax}\big(f(e^t; x) / \tau\big) \,\Big\Vert\,
\mathrm{softmax}\big(f(w; x) / \tau\big)\Big)\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla L_m(w_{m,k}; \xi) - u_m\big)\\
u_m &\leftarrow u_m - \tfrac{1}{\beta}\, (w_{m,K_m} - w^t)
\end{aligned}
$$

It uploads $\Delta_m = w_{m,K_m} - w^t$. Server ($M$: all clients), in the paper's order:

$$
\begin{aligned}
u &\leftarrow u - \frac{1}{\beta M} \sum_{m \in N_t} \Delta_m\\
w^{t+1} &= w^t + \sum_{m \in N_t} p_m \Delta_m - \beta u\\
e^{t+1} &= \alpha\, e^t + (1 - \alpha)\, w^{t+1}
\end{aligned}
$$

KL: a mean over the batch's real examples (or loss tokens). Defaults: $\gamma$ = `gamma` ({{gamma}}),
$\tau$ = `tau` ({{tau}}), $\alpha$ = `alpha` ({{alpha}}), $\beta$ = `beta` ({{beta}}). `tau_squared=False` drops
the $\tau^2$; `admm=False` keeps $u_m = u = 0$; `bookkeeping='authors'` keeps $D_m = -\beta u_m$
and $S = -\beta M u$ instead, equal up to rounding. $\eta_t$, $p_m$, $\mathrm{opt}$: as for
[FedAvg](fedavg.md).
""",
    "fedgmt_v2": r"""
[FedGMT](fedgmt.md) with each client's own EMA instead of the server's: only $w^t$ goes down.
Server state: $w^t$ and the dual $u$; client $m$ keeps its dual $u_m$ and its EMA $e_m$. On
arrival client $m \in N_t$ updates $e_m$, then trains from $w_{m,0} = w^t$ (fresh optimiser) with
$e_m$ as the frozen teacher:

$$
\begin{aligned}
e_m &\leftarrow \alpha\, e_m + (1 - \alpha)\, w^t\\
L_m(w; \xi) &= \mathrm{CE}\big(f(w; x), y\big) + \gamma \tau^2 \operatorname{KL}\Big(
\mathrm{softmax}\big(f(e_m; x) / \tau\big) \,\Big\Vert\,
\mathrm{softmax}\big(f(w; x) / \tau\big)\Big)\\
w_{m,k+1} &= w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla L_m(w_{m,k}; \xi) - u_m\big)\\
u_m &\leftarrow u_m - \tfrac{1}{\beta}\, (w_{m,K_m} - w^t)
\end{aligned}
$$

It keeps $e_m$ and $u_m$ and uploads $\Delta_m = w_{m,K_m} - w^t$. Server ($M$: all clients):

$$
u \leftarrow u - \frac{1}{\beta M} \sum_{m \in N_t} \Delta_m,
\qquad w^{t+1} = w^t + \sum_{m \in N_t} p_m \Delta_m - \beta u
$$

Before its first participation $e_m$ is the first $w^t$ it receives (`v2_ema_init`
`'first_received'`: the first update gives $e_m = w^t$) or $w^0$ (`'w0'`). $\alpha$ = `alpha`
({{alpha}}); $\gamma$, $\tau$, $\beta$ and the options as for FedGMT. $\eta_t$, $p_m$, $\mathrm{opt}$:
as for [FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------ fed_wmsam.py
    "fedwmsam": r"""
Server state: $x^r$, the momentum $\Delta$ in gradient units, the global control $c$, the weight
$\alpha_r$ ($\alpha_0$ = `alpha`, {{alpha}}) and a control $c_k$ per client (all vectors 0 at start).
Client $k \in N_r$ receives $x^r$ and its personalized momentum, starts from
$x_{k,0} = t_{k,0} = x^r$ with a fresh optimiser and, on each batch $\xi$ (one backward pass):

$$
\begin{aligned}
m_k &= \Delta + \frac{\alpha_r}{1 - \alpha_r}\, (c - c_k)\\
\delta_b &= t_{k,b} - x_{k,b}, \qquad
e_b = \rho\, \frac{\delta_b}{\lVert \delta_b \rVert + {{$algorithms.fed_wmsam.PERTURBATION_EPS}}}\\
G &= \mathrm{clip}_{C}\big(\alpha_r\, \nabla f_k(x_{k,b} + e_b; \xi) + (1 - \alpha_r)\, m_k\big)\\
x_{k,b+1} &= x_{k,b} - \eta_r\, \mathrm{opt}(G), \qquad t_{k,b+1} = t_{k,b} + m_k
\end{aligned}
$$

It uploads $\Delta_k = x_{k,K_k} - x^r$. The server, with the previous round's $\Delta$
($v_k = 0$ when $\lVert \Delta_k \rVert \lVert \Delta \rVert = 0$; $M$: all clients):

$$
\begin{aligned}
v_k &= \cos(\Delta_k, \Delta) + 1, \qquad
\alpha_{r+1} = (1 - \lambda)\, \alpha_r + \lambda\, \min\Big(\max\Big(\tfrac{1}{|N_r|}
\textstyle\sum_{k} v_k,\ {{$algorithms.fed_wmsam.ALPHA_HAT_BOUNDS.0}}\Big),\ {{$algorithms.fed_wmsam.ALPHA_HAT_BOUNDS.1}}\Big)\\
c_k^+ &= c_k - c - \frac{\Delta_k}{K_k\, \eta_r}, \qquad
c \leftarrow c + \frac{1}{M} \sum_{k \in N_r} (c_k^+ - c_k)\\
\Delta &\leftarrow \gamma \sum_{k \in N_r} p_k\, \frac{x^r - x_{k,K_k}}{K_k\, \eta_r}, \qquad
x^{r+1} = \mathrm{ServerOpt}\Big(x^r; \sum_{k \in N_r} p_k\, (x^r - x_{k,K_k})\Big)
\end{aligned}
$$

$\rho$ = `rho` ({{rho}}); $\lambda$ = `alpha_smoothing` ({{alpha_smoothing}}; 0 freezes $\alpha$); $\gamma$ =
`momentum_decay` ({{momentum_decay}}); $\mathrm{clip}_C(G) = G \min\big(1, C / (\lVert G \rVert + {{$core.optimizers.CLIP_EPS}})\big)$ with $C$ =
`max_grad_norm` ({{max_grad_norm}}; 0: none); $\mathrm{opt}$: SGD with momentum `momentum` ({{momentum}}) and weight decay
`weight_decay` ({{weight_decay}}), not `local.momentum` / `local.weight_decay`. `variant='paper'` is the
poster's $e_b$ above; `'code_intended'` is $-e_b$; `'code_exact'` shifts parameter tensor $i$ (of
$P$, in leaf order) by the scalar $-\rho\, d_i / (\sum_{j<P} |d_j| + {{$algorithms.fed_wmsam.PERTURBATION_EPS}})$, $d$ the flattened
$\delta_b$, as the authors' code does. `control_variates=False` sets $m_k = \Delta$ (FedCM's
base). $\eta_r$, $p_k$, $\mathrm{ServerOpt}$: as for [FedAvg](fedavg.md) (sgd, lr 1:
$x^{r+1} = x^r + \sum_k p_k \Delta_k$).
""",
    # --------------------------------------------------------------------------------- fed_gf.py
    "fedgf": r"""
Server state: $w^t$, the perturbed global model $\tilde w^t$, the weight $c$ ($c = 0$ at the
start) and a window of the last $W$ divergence flags. The server sends $(w^t, \tilde w^t, c)$.
Client $m$ starts from $w_{m,0} = w^t$ with a fresh optimiser; on each batch $\xi$ (the same
batch for both passes):

$$
\begin{aligned}
g &= \nabla f_m(w_{m,k}; \xi), \qquad
w_a = w_{m,k} + \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
w_p &= c\, \tilde w^t + (1 - c)\, w_a, \qquad
w_{m,k+1} = w_{m,k} - \eta_t\, \mathrm{opt}\big(\nabla f_m(w_p; \xi)\big)
\end{aligned}
$$

It keeps nothing and uploads $\Delta_m = w^t - w_{m,K_m}$. Server, in this order:

$$
\begin{aligned}
D_t &= \frac{1}{\lvert N_t \rvert} \sum_{m \in N_t} \lVert \Delta_m \rVert, \qquad
c = \frac{1}{L} \sum_{s = t - L + 1}^{t} \mathbf{1}[D_s > T_D], \quad L = \min(t + 1, W)\\
\Delta &= \sum_{m \in N_t} p_m \Delta_m, \qquad w^{t+1} = w^t - \Delta, \qquad
\tilde w^{t+1} = w^{t+1} + \rho_g\, \frac{\Delta}{\lVert \Delta \rVert + {{$core.tree.NORM_EPS}}}
\end{aligned}
$$

The new $c$ is used in round $t + 1$; round 0 ($c = 0$) is a FedSAM round. $\rho$ = `rho`
({{rho}}), $\rho_g$ = `g_rho` ({{g_rho}}: $\rho$), $T_D$ = `T_D` ({{T_D}}), $W$ = `W` ({{W}}). $c = 0$
($T_D$ above every divergence) is [FedSAM](fedsam.md) exactly. $\mathrm{opt}$: SGD with
momentum `momentum` ({{momentum}}) and weight decay `weight_decay` ({{weight_decay}}); $p_m$: as for
[FedAvg](fedavg.md).
""",
    # ------------------------------------------------------------------------------- fed_nsam.py
    "fednsam": r"""
Server state: $w^t$ and the momentum $m^t$ ($m^0 = 0$). Variant `n2` (default, the authors'
HEAD code): the server sends $\hat w^t = w^t + \gamma\, m^t$; client $m$ starts from
$y_0 = \hat w^t$ with a fresh optimiser and on each batch $\xi$ takes a SAM step with a
clipped gradient:

$$
\begin{aligned}
g &= \nabla f_m(y_k; \xi), \qquad e = \rho\, \frac{g}{\lVert g \rVert + {{$core.tree.NORM_EPS}}}\\
y_{k+1} &= y_k - \eta_t\, \mathrm{opt}\Big(\mathrm{clip}_C\big(\nabla f_m(y_k + e; \xi)\big)\Big)
\end{aligned}
$$

It keeps nothing and uploads $\Delta_m = y_{K_m} - \hat w^t$. Server:

$$
\Delta = \sum_{m \in N_t} p_m \Delta_m, \qquad m^{t+1} = \gamma\, m^t + \Delta, \qquad
w^{t+1} = w^t + m^{t+1}
$$

Variant `n1`: $m^{t+1} = (1 + \gamma)\, \Delta$ for $t \ge 1$ ($m^1 = \Delta$). Variants `n3`
and `n4`: the server sends $(w^t, m^t)$, $y_0 = w^t$, every step uses the gradient at a point
fixed by the momentum, with no SAM ascent and no clipping,

$$
y_{k+1} = y_k - \eta_t\, \mathrm{opt}\big(\nabla f_m(y_k + \gamma\, m^t
- \beta\, \rho\, \tfrac{m^t}{\lVert m^t \rVert + {{$algorithms.fed_nsam.N4_NORM_EPS}}}; \xi)\big)
$$

with $\beta = 0$ (`n3`) or $\beta = 1$ (`n4`); they upload $y_{K_m} - w^t$ and use `n2`'s server.
$\rho$ = `rho` ({{rho}}), $\gamma$ = `gamma` ({{gamma}}); $\mathrm{clip}_C(v) = v \min\big(1, C / (\lVert v \rVert + {{$core.optimizers.CLIP_EPS}})\big)$,
$C$ = `clip_norm` ({{clip_norm}}: 10 for `n1`/`n2`, off for `n3`/`n4`). $\mathrm{opt}$: SGD with momentum
`momentum` ({{momentum}}) and weight decay `weight_decay` ({{weight_decay}}). $\rho = \gamma = 0$ with
`clip_norm` = 0 is [FedAvg](fedavg.md) exactly; $p_m$: as for FedAvg.
""",
    # ------------------------------------------------------- FedSWA family (fed_swa.py)
    "fedswa": r"""
Round $t$: client $m \in N_t$ starts from $y_0 = w^t$ with a fresh optimiser and takes $K_m$ steps
with a learning rate that restarts at $s\,\eta_t$ every round and decays linearly towards
$s\,\rho\,\eta_t$; the raw gradient is clipped to norm $C$ first:

$$
\begin{aligned}
\eta_k &= s\, \eta_t \Big(1 - (1 - \rho)\, \frac{k}{K_m}\Big), \qquad k = 0, \dots, K_m - 1\\
y_{k+1} &= y_k - \eta_k\, \mathrm{opt}\big(\mathrm{clip}_C(\nabla f_m(y_k; \xi))\big)
\end{aligned}
$$

It keeps nothing and uploads $\Delta_m = w^t - y_{K_m}$. The server moves from $w^t$ by $\alpha$
times the weighted mean update ($\alpha = 1$: the average of the client models; $\alpha > 1$
extrapolates):

$$
w^{t+1} = w^t - \alpha \sum_{m \in N_t} p_m \Delta_m
$$

$\mathrm{clip}_C(g) = g \min\big(1, C / (\lVert g \rVert + {{$core.optimizers.CLIP_EPS}})\big)$, one global norm,
$C$ = `clip_norm` ({{clip_norm}}; 0: none). $\mathrm{opt}$: SGD with momentum `momentum` ({{momentum}}) and coupled
weight decay `weight_decay` ({{weight_decay}}), the block's, not `config.local`'s. `variant='paper'`:
$s = 1$, $\rho$ = `rho` ({{algorithms.fed_swa.FEDSWA_PRESETS.paper.rho}}), $\alpha$ = `alpha` ({{algorithms.fed_swa.FEDSWA_PRESETS.paper.alpha}}); `'code'` (the authors' current code):
$s = 2$, $\rho = 0$, $\alpha = 1$. $\rho = 1$, $\alpha = 1$ is [FedAvg](fedavg.md). $\eta_t$,
$p_m$: as for FedAvg.
""",
    "fedmoswa": r"""
[FedSWA](fedswa.md) with SCAFFOLD's control variates and a momentum on the server's (clients are
indexed by $i$ here, as in the paper: $m$ is the server's control). Server state: $w^t$ and the
control $m$; client $i$ keeps its control $c_i$ (all 0 at start). Client $i \in N_t$ receives
$(w^t, m)$, starts from $y_0 = w^t$ with a fresh optimiser and takes $K_i$ corrected steps with
FedSWA's in-round schedule, then updates its control (option II with the round's own step sum
$S_i$):

$$
\begin{aligned}
\eta_k &= s\, \eta_t \Big(1 - (1 - \rho)\, \frac{k}{K_i}\Big), \qquad
S_i = \sum_{k=0}^{K_i - 1} \eta_k = s\, \eta_t\, \frac{K_i (1 + \rho) + 1 - \rho}{2}\\
y_{k+1} &= y_k - \eta_k\, \mathrm{opt}\big(\mathrm{clip}_C(\nabla f_i(y_k; \xi)) - c_i + m\big)\\
c_i^+ &= c_i - m + \frac{w^t - y_{K_i}}{S_i}
\end{aligned}
$$

It keeps $c_i^+$ and uploads $(w^t - y_{K_i},\ c_i^+ - m)$. Server ($|N_t|$: the cohort size):

$$
\begin{aligned}
m &\leftarrow m + \frac{\gamma}{|N_t|} \sum_{i \in N_t} (c_i^+ - m)\\
w^{t+1} &= w^t - \alpha \sum_{i \in N_t} p_i\, (w^t - y_{i,K_i})
\end{aligned}
$$

`variant='paper'`: $s = 1$, $\rho$ = `rho` ({{algorithms.fed_swa.FEDMOSWA_PRESETS.paper.rho}}), $\alpha$ = `alpha` ({{algorithms.fed_swa.FEDMOSWA_PRESETS.paper.alpha}}), $\gamma$ = `gamma`
({{algorithms.fed_swa.FEDMOSWA_PRESETS.paper.gamma}}). `'code'` (the authors' current code): a constant in-round rate ($\rho = 1$), $\alpha = 1$,
$\gamma = {{$algorithms.fed_swa.FEDMOSWA_PRESETS.code.gamma}}$, and $\gamma = 1$ in round 0. With every client in every round,
$\gamma = \rho = \alpha = 1$ is [SCAFFOLD](scaffold.md). $\mathrm{clip}_C$, $\mathrm{opt}$: as
for FedSWA; $\eta_t$, $p_i$: as for [FedAvg](fedavg.md).
""",
    # ---------------------------------------------------------- minimax (minimax/algorithms.py)
    "fess_gda": r"""
Problem $\min_x \max_{y \in Y} f(x, y)$. Server state $(x_t, y_t, z_t)$ with $z_0 = x_0$; $z$
never leaves the server. Client $i$ starts from $(x_t, y_t)$ and takes $K_i$ simultaneous steps,
both gradients at the same point and on the same minibatch $\xi$:

$$
\begin{aligned}
x &\leftarrow x - \eta_{xl}\, \nabla_x f_i(x, y; \xi)\\
y &\leftarrow P_Y\big(y + \eta_{yl}\, \nabla_y f_i(x, y; \xi)\big)
\end{aligned}
$$

It uploads $(x_{i,K} - x_t,\ y_{i,K} - y_t)$ and $K_i$. Server, with
$\bar x - x_t = \sum_i p_i (x_{i,K} - x_t)$ (and $\bar y$ alike) and $K = \sum_i p_i K_i$:

$$
\begin{aligned}
x_{t+1} &= x_t + \eta_{xg}\, (\bar x - x_t) - \eta_{xl}\, \eta_{xg}\, K p\, (x_t - z_t)\\
y_{t+1} &= P_Y\big(y_t + \eta_{yg}\, (\bar y - y_t)\big)\\
z_{t+1} &= z_t + \beta\, (x_{t+1} - z_t)
\end{aligned}
$$

$P_Y$: the Euclidean projection onto $Y$; $p_i$: the aggregation weights. Defaults:
$\eta_{xg}$ = `eta_xg` ({{eta_xg}}), $\eta_{yg}$ = `eta_yg` ({{eta_yg}}), $p$ = `p` ({{p}}: Local SGDA), $\beta$ =
`beta` ({{beta}}); $\eta_{xl}$, $\eta_{yl}$ = `minimax.lr_x`, `minimax.lr_y`. The local steps shown
are the default plain SGD; `minimax.optimizer_x`/`optimizer_y` = `'adam'` makes them Adam steps.
""",
    "local_sgda": r"""
Problem $\min_x \max_{y \in Y} f(x, y)$. Client $i$ starts from the broadcast $(x_t, y_t)$ and
takes $K_i$ simultaneous steps, both gradients at the same point and on the same minibatch $\xi$:

$$
\begin{aligned}
x &\leftarrow x - \eta_{xl}\, \nabla_x f_i(x, y; \xi)\\
y &\leftarrow P_Y\big(y + \eta_{yl}\, \nabla_y f_i(x, y; \xi)\big)
\end{aligned}
$$

It uploads $(x_{i,K} - x_t,\ y_{i,K} - y_t)$. The server takes the weighted means:

$$
x_{t+1} = \bar x = \sum_i p_i\, x_{i,K}, \qquad y_{t+1} = \bar y = \sum_i p_i\, y_{i,K}
$$

$P_Y$: the Euclidean projection onto $Y$; $p_i$: the aggregation weights (uniform $1/m$ in the
papers); $\eta_{xl}$, $\eta_{yl}$ = `minimax.lr_x`, `minimax.lr_y`. The local steps shown are
the default plain SGD; `minimax.optimizer_x`/`optimizer_y` = `'adam'` makes them Adam steps.
""",
    "local_sgda_plus": r"""
[Local SGDA](local_sgda.md) with a snapshot $\tilde x$ ($\tilde x = x_0$ at start) for the max
player's gradient, sent down with $(x_t, y_t)$. Client $i$ starts from $(x_t, y_t)$ and takes
$K_i$ steps on minibatches $\xi$:

$$
\begin{aligned}
x &\leftarrow x - \eta_{xl}\, \nabla_x f_i(x, y; \xi)\\
y &\leftarrow P_Y\big(y + \eta_{yl}\, \nabla_y f_i(\tilde x, y; \xi)\big)
\end{aligned}
$$

It uploads $(x_{i,K} - x_t,\ y_{i,K} - y_t)$. Server: the weighted means, then the snapshot
refresh every $S$ rounds:

$$
x_{t+1} = \sum_i p_i\, x_{i,K}, \qquad y_{t+1} = \sum_i p_i\, y_{i,K},
\qquad \tilde x \leftarrow x_{t+1} \ \text{ if } (t + 1) \bmod S = 0
$$

$S$ = `snapshot_every` ({{snapshot_every}}; rounds, not local iterations: our reading). $P_Y$: the Euclidean
projection onto $Y$; $p_i$: the aggregation weights; $\eta_{xl}$, $\eta_{yl}$ = `minimax.lr_x`,
`minimax.lr_y`; plain SGD steps by default (`'adam'` per player makes them Adam steps).
""",
    "fed_norm_sgda": r"""
Problem $\min_x \max_{y \in Y} f(x, y)$. Client $i$ starts from $(x_t, y_t)$ and takes $\tau_i$
simultaneous steps, both gradients at the same point and on the same minibatch $\xi$:

$$
\begin{aligned}
x &\leftarrow x - \eta_{xl}\, \nabla_x f_i(x, y; \xi)\\
y &\leftarrow P_Y\big(y + \eta_{yl}\, \nabla_y f_i(x, y; \xi)\big)
\end{aligned}
$$

It uploads $(x_{i,\tau_i} - x_t,\ y_{i,\tau_i} - y_t)$ and $\tau_i$. The server normalises each
update by its number of steps:

$$
\begin{aligned}
h_{x,i} &= \frac{x_t - x_{i,\tau_i}}{\eta_{xl}\, \tau_i}, \qquad
h_{y,i} = \frac{y_{i,\tau_i} - y_t}{\eta_{yl}\, \tau_i}, \qquad
\tau_{\mathrm{eff}} = \sum_i p_i\, \tau_i\\
x_{t+1} &= x_t - \gamma_x\, \tau_{\mathrm{eff}} \sum_i p_i\, h_{x,i}\\
y_{t+1} &= P_Y\Big(y_t + \gamma_y\, \tau_{\mathrm{eff}} \sum_i p_i\, h_{y,i}\Big)
\end{aligned}
$$

$\gamma_x$ = `gamma_x`, $\gamma_y$ = `gamma_y` ({{gamma_y}}: $\eta_{xl}$, $\eta_{yl}$, which is plain
averaging when all $\tau_i$ are equal). $P_Y$: the Euclidean projection onto $Y$; $p_i$: the
aggregation weights; $\eta_{xl}$, $\eta_{yl}$ = `minimax.lr_x`, `minimax.lr_y`; plain SGD steps
by default (`'adam'` per player makes them Adam steps).
""",
    "fed_norm_sgda_plus": r"""
[Fed-Norm-SGDA](fed_norm_sgda.md) with Local SGDA+'s snapshot $\tilde x$ ($x_0$ at start), sent
down with $(x_t, y_t)$. Client $i$ takes $\tau_i$ steps on minibatches $\xi$:

$$
\begin{aligned}
x &\leftarrow x - \eta_{xl}\, \nabla_x f_i(x, y; \xi)\\
y &\leftarrow P_Y\big(y + \eta_{yl}\, \nabla_y f_i(\tilde x, y; \xi)\big)
\end{aligned}
$$

It uploads $(x_{i,\tau_i} - x_t,\ y_{i,\tau_i} - y_t)$ and $\tau_i$. Server:

$$
\begin{aligned}
h_{x,i} &= \frac{x_t - x_{i,\tau_i}}{\eta_{xl}\, \tau_i}, \qquad
h_{y,i} = \frac{y_{i,\tau_i} - y_t}{\eta_{yl}\, \tau_i}, \qquad
\tau_{\mathrm{eff}} = \sum_i p_i\, \tau_i\\
x_{t+1} &= x_t - \gamma_x\, \tau_{\mathrm{eff}} \sum_i p_i\, h_{x,i}, \qquad
y_{t+1} = P_Y\Big(y_t + \gamma_y\, \tau_{\mathrm{eff}} \sum_i p_i\, h_{y,i}\Big)\\
\tilde x &\leftarrow x_{t+1} \ \text{ if } (t + 1) \bmod S = 0
\end{aligned}
$$

$S$ = `snapshot_every` ({{snapshot_every}}); $\gamma_x$, $\gamma_y$ = `gamma_x`, `gamma_y` ({{gamma_y}}: $\eta_{xl}$,
$\eta_{yl}$). $P_Y$: the Euclidean projection onto $Y$; $p_i$: the aggregation weights;
$\eta_{xl}$, $\eta_{yl}$ = `minimax.lr_x`, `minimax.lr_y`; plain SGD steps by default.
""",
}
