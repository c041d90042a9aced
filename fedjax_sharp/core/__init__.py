"""The functional federated engine: algorithm interface, round engine, tree math, losses."""
from fedjax_sharp.core import losses, strategies, tree
from fedjax_sharp.core.algorithm import (ClientInfo, Communication, FederatedAlgorithm,
                                         RoundInfo)
from fedjax_sharp.core.cohort import ClientSlices, CohortSampler, num_local_steps
from fedjax_sharp.core.engine import Cohort, RoundEngine, TrainData
from fedjax_sharp.core.execution import CLIENT_STRATEGIES, LOCAL_LOOPS, ExecutionConfig

__all__ = ["losses", "strategies", "tree", "ClientInfo", "Communication", "FederatedAlgorithm", "RoundInfo",
           "ClientSlices", "CohortSampler", "num_local_steps", "CLIENT_STRATEGIES", "LOCAL_LOOPS", "Cohort",
           "ExecutionConfig", "RoundEngine", "TrainData"]
