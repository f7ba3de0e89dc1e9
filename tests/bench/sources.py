"""C snippets the bench tests build kernels from."""

from hargo_hpc.bench.validate import SIGNATURE as SIG

# the product, written the plainest way (what a hostile kernel adds its trick to)
NAIVE_BODY = """
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
"""

__all__ = ["NAIVE_BODY", "SIG"]
