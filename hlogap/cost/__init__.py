"""The cost model's parts; the public interface is `hlogap.costs` (docs/cost-model.md).

base: OpCost, the module index, shapes -> HBM bytes. matmul: dot and convolution FLOPs.
custom_calls: cuDNN, cuBLAS/hipBLASLt, fused attention, Pallas kernels. flops: XLA's FLOP count
per op. collectives: the ring model. traffic: HBM bytes per op. model: ops, computations, modules.
"""
