"""The RoCEv2 baseline: one hashed path per QP, go-back-N, DCQCN."""
