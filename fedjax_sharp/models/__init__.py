"""Flax models used by the papers, and a registry keyed by config names."""
from fedjax_sharp.models.registry import (MODELS, count_params, get_model, in_pieces,
                                         init_params)
from fedjax_sharp.models.cnn import McMahanCNN, LeNet5, MLP, Linear, max_pool_2x2
from fedjax_sharp.models.zoo import (ResNetGN, ResNet8, ResNet18, ViTSmall, FastText,
                                     MobileNetV2GN, VGG11GN, AG_NEWS_VOCAB_SIZE)

__all__ = ["MODELS", "get_model", "init_params", "count_params", "McMahanCNN", "LeNet5", "MLP",
           "Linear", "max_pool_2x2", "ResNetGN", "ResNet8", "ResNet18", "ViTSmall", "FastText",
           "MobileNetV2GN", "VGG11GN", "AG_NEWS_VOCAB_SIZE"]
