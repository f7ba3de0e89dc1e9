"""HPC tasks (data race detection, MLPerf QA, PLP QA, GEMM): data, prompt, extraction, reward,
metrics. Not implemented yet: a later issue fills this package."""
