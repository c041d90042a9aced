"""A federated GAN as a minimax task: x = generator, y = discriminator (both unconstrained).

Our setting (the FESS-GDA paper's GAN settings are not available offline): 28x28x1 images in
[-1, 1], a small DCGAN without normalisation layers (stateless, so the engine vmaps clients
freely), latent dimension 64. On a batch of real images and as many noise draws z:

    discriminator (ascent)  f_D(x, y) = mean log sigmoid(D(real)) + mean log(1 - sigmoid(D(G(z))))
    generator (descent)     L_G(x, y) = -mean log sigmoid(D(G(z)))    (non-saturating loss)

The metric is a Frechet distance (FID-style) between test images and generated samples in
the penultimate-layer features of a CNN classifier that the library trains on the same
dataset (no downloaded Inception weights), cached as a file and reported with its test
accuracy; sample grids are saved as PNG.
"""
from __future__ import annotations

import io
import os
from typing import Callable

import flax.linen as nn
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sharp import fileio
from fedjax_sharp import models as models_lib
from fedjax_sharp.core import backends
from fedjax_sharp.core.engine import TrainData
from fedjax_sharp.minimax import projections
from fedjax_sharp.minimax.tasks import MinimaxTask

LATENT_DIM = 64


class Generator(nn.Module):
  latent_dim: int = LATENT_DIM

  @nn.compact
  def __call__(self, z):
    h = nn.relu(nn.Dense(7 * 7 * 64, name="fc")(z)).reshape(z.shape[0], 7, 7, 64)
    h = nn.relu(nn.ConvTranspose(32, (4, 4), strides=(2, 2), padding="SAME", name="up1")(h))
    return jnp.tanh(nn.ConvTranspose(1, (4, 4), strides=(2, 2), padding="SAME", name="up2")(h))


class Discriminator(nn.Module):
  @nn.compact
  def __call__(self, x):
    h = nn.leaky_relu(nn.Conv(32, (4, 4), strides=(2, 2), padding="SAME", name="conv1")(x), 0.2)
    h = nn.leaky_relu(nn.Conv(64, (4, 4), strides=(2, 2), padding="SAME", name="conv2")(h), 0.2)
    return nn.Dense(1, name="out")(h.reshape(h.shape[0], -1))[:, 0]


class FeatureCNN(nn.Module):
  """The classifier whose 128-d penultimate features define the Frechet distance."""
  num_classes: int = 10

  @nn.compact
  def __call__(self, x, features: bool = False):
    h = nn.relu(nn.Conv(32, (3, 3), strides=(2, 2), padding="SAME", name="conv1")(x))
    h = nn.relu(nn.Conv(64, (3, 3), strides=(2, 2), padding="SAME", name="conv2")(h))
    h = nn.relu(nn.Dense(128, name="fc")(h.reshape(h.shape[0], -1)))
    return h if features else nn.Dense(self.num_classes, name="out")(h)


def to_unit_range(x, key=None):
  """uint8 [0, 255] -> float [-1, 1] (the generator's tanh range)."""
  return x.astype(jnp.float32) / 127.5 - 1.0


def gan_losses(gen: Generator, disc: Discriminator):
  def losses(params, batch, key):
    real = batch["x"]
    z = jax.random.normal(key, (real.shape[0], gen.latent_dim))
    mask = batch["mask"].astype(jnp.float32)

    def d_objective(d_params, fake):
      real_term = jnp.sum(jax.nn.log_sigmoid(disc.apply({"params": d_params}, real)) * mask)
      real_term = real_term / jnp.maximum(jnp.sum(mask), 1.0)
      fake_term = jnp.mean(jax.nn.log_sigmoid(-disc.apply({"params": d_params}, fake)))
      return real_term + fake_term

    def g_loss(g_params):
      fake = gen.apply({"params": g_params}, z)
      return -jnp.mean(jax.nn.log_sigmoid(disc.apply({"params": params["y"]}, fake))), fake

    (_, fake), g_x = jax.value_and_grad(g_loss, has_aux=True)(params["x"])
    value, g_y = jax.value_and_grad(d_objective)(params["y"], jax.lax.stop_gradient(fake))
    return {"x": g_x, "y": g_y}, value
  return losses


def frechet_distance(mu1, cov1, mu2, cov2) -> float:
  """||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^{1/2}), via the symmetric form
  Tr((S1^{1/2} S2 S1^{1/2})^{1/2}) (float64, eigendecompositions)."""
  mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
  cov1, cov2 = np.asarray(cov1, np.float64), np.asarray(cov2, np.float64)
  w, v = np.linalg.eigh(cov1)
  sqrt1 = (v * np.sqrt(np.maximum(w, 0))) @ v.T
  middle = np.linalg.eigvalsh(sqrt1 @ cov2 @ sqrt1)
  return float(np.sum((mu1 - mu2) ** 2) + np.trace(cov1) + np.trace(cov2)
               - 2.0 * np.sum(np.sqrt(np.maximum(middle, 0))))


def feature_classifier(dataset, cache_path: str, epochs: int = 2, batch_size: int = 128,
                       seed: int = 0):
  """Trains (or loads from `cache_path`) the FeatureCNN on the dataset; returns
  (features_fn(images in [-1, 1]) -> [N, 128], test accuracy)."""
  model = FeatureCNN(dataset.num_classes)
  x_train = np.asarray(dataset.x_train)
  params = models_lib.init_params(model, jax.random.key(seed), x_train.shape[1:])
  if cache_path and os.path.exists(cache_path):
    with open(cache_path, "rb") as f:
      state = flax.serialization.from_bytes({"params": params, "test_accuracy": 0.0}, f.read())
    params, accuracy = state["params"], float(state["test_accuracy"])
  else:
    tx = optax.adam(1e-3)
    opt_state = tx.init(params)

    @backends.jit
    def step(params, opt_state, xb, yb):
      def loss(p):
        logits = model.apply({"params": p}, to_unit_range(xb))
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
      grads = jax.grad(loss)(params)
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    rng = np.random.default_rng(seed)
    for _ in range(epochs):
      order = rng.permutation(len(x_train))
      for start in range(0, len(order) - batch_size + 1, batch_size):
        idx = order[start:start + batch_size]
        params, opt_state = step(params, opt_state, jnp.asarray(x_train[idx]),
                                 jnp.asarray(dataset.y_train[idx]))
    predict = backends.jit(
        lambda p, xb: jnp.argmax(model.apply({"params": p}, to_unit_range(xb)), -1))
    correct = sum(int(jnp.sum(predict(params, jnp.asarray(dataset.x_test[s:s + 1000]))
                              == jnp.asarray(dataset.y_test[s:s + 1000])))
                  for s in range(0, len(dataset.y_test), 1000))
    accuracy = correct / len(dataset.y_test)
    if cache_path:
      fileio.atomic_write_bytes(cache_path, flax.serialization.to_bytes(
          {"params": params, "test_accuracy": accuracy}))
  features = backends.jit(lambda xb: model.apply({"params": params}, xb, features=True))
  return features, accuracy


def save_grid(images: np.ndarray, path: str, rows: int = 8) -> None:
  """Saves up to rows x rows images in [-1, 1] (N, H, W, 1) as one PNG, atomically."""
  from PIL import Image
  n = min(len(images), rows * rows)
  h, w = images.shape[1:3]
  grid = np.ones((rows * (h + 2), rows * (w + 2)), np.float32)
  for i in range(n):
    r, c = divmod(i, rows)
    grid[r * (h + 2) + 1:r * (h + 2) + 1 + h, c * (w + 2) + 1:c * (w + 2) + 1 + w] = (
        images[i, :, :, 0] + 1.0) / 2.0
  buffer = io.BytesIO()
  Image.fromarray((np.clip(grid, 0, 1) * 255).astype(np.uint8)).resize(
      (grid.shape[1] * 3, grid.shape[0] * 3), Image.NEAREST).save(buffer, format="PNG")
  fileio.atomic_write_bytes(path, buffer.getvalue())


def gan_task(dataset, client_indices, *, cache_path: str = "", fd_samples: int = 2000,
             classifier_epochs: int = 2, seed: int = 0) -> MinimaxTask:
  gen, disc = Generator(), Discriminator()
  image_shape = np.asarray(dataset.x_train).shape[1:]
  if tuple(image_shape) != (28, 28, 1):
    raise ValueError(f"task.name='gan': the DCGAN generates 28x28x1 images; data.name="
                     f"{dataset.name!r} has {tuple(image_shape)} (use fashion_mnist or mnist)")

  def init_params(key):
    # Each network's init is one compiled program (`models.init_params`: the bits of an
    # op-by-op init, faster than dispatching its random draws one by one).
    kx, ky = jax.random.split(key)
    return {"x": models_lib.init_params(gen, kx, (gen.latent_dim,)),
            "y": models_lib.init_params(disc, ky, tuple(image_shape))}

  features, clf_accuracy = feature_classifier(dataset, cache_path, epochs=classifier_epochs,
                                              seed=seed)
  real = np.concatenate([np.asarray(features(to_unit_range(jnp.asarray(
      dataset.x_test[s:s + 1000])))) for s in range(0, len(dataset.y_test), 1000)])
  mu_real, cov_real = real.mean(0), np.cov(real, rowvar=False)
  noise = jax.random.normal(jax.random.key(seed + 12345), (fd_samples, gen.latent_dim))
  generate = backends.jit(lambda g_params, z: gen.apply({"params": g_params}, z))

  def samples(params, n=None):
    z = noise if n is None else noise[:n]
    return np.concatenate([np.asarray(generate(params["x"], z[s:s + 500]))
                           for s in range(0, len(z), 500)])

  def evaluate(params):
    fake = samples(params)
    f = np.concatenate([np.asarray(features(jnp.asarray(fake[s:s + 1000])))
                        for s in range(0, len(fake), 1000)])
    return {"frechet_distance": frechet_distance(mu_real, cov_real, f.mean(0),
                                                 np.cov(f, rowvar=False)),
            "feature_classifier_accuracy": clf_accuracy}

  def artifacts(params, workdir: str, tag: str) -> None:
    save_grid(samples(params, 64), os.path.join(workdir, f"samples_{tag}.png"))

  sizes = {k: int(sum(np.size(a) for a in jax.tree.leaves(v)))
           for k, v in jax.eval_shape(init_params, jax.random.key(0)).items()}
  return MinimaxTask(
      name="gan", init_params=init_params, gradients=gan_losses(gen, disc),
      project_y=projections.identity,
      train_data=TrainData(jnp.asarray(dataset.x_train), jnp.asarray(dataset.y_train)),
      client_indices=client_indices, evaluate=evaluate, primary_metric="frechet_distance",
      higher_is_better=False, preprocess=to_unit_range,
      param_sizes=sizes, artifacts=artifacts,
      extras={"feature_classifier_accuracy": clf_accuracy})
