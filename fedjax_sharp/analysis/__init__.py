"""Analysis tools for trained models: Hessian eigenvalues (`hessian`), SAM sharpness and the
Hessian trace (`sharpness`), loss landscapes (`landscape`), per-client accuracy percentiles
(`clients`). Pure functions of a params pytree, an `apply_fn` / `loss_fn` and batches."""
from fedjax_sharp.analysis import clients, hessian, landscape, sharpness

__all__ = ["clients", "hessian", "landscape", "sharpness"]
