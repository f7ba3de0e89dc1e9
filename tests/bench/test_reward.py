"""The reward rises with measured speed everywhere below the physical limit (issue 24, item 1).

Pure functions only (no timing on this noisy VM): the node's peak from canned /proc/cpuinfo
texts (expected values computed by hand in the comments), the reward's shape in q for every
shaping, the suspicious bound, and the choice of the reference's OpenBLAS core type."""

from __future__ import annotations

import itertools
import math

import pytest

from hargo_hpc.bench.peak import (
    ASSUMED_GHZ,
    NOMINAL_TURBO,
    clock_ghz,
    cpu_flags,
    flop_per_cycle,
    peak_from,
)
from hargo_hpc.bench.reference import (
    corename_symbols,
    coretype_candidates,
    cpu_level,
    openblas_kernel,
)
from hargo_hpc.bench.reward import is_suspicious, shaped_reward
from hargo_hpc.bench.settings import BenchSettings

SPR_FLAGS = ("fpu sse sse2 avx fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 "
             "amx_bf16 amx_tile avx512_fp16")  # fmt: skip
ZEN5_FLAGS = "fpu sse sse2 avx fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16"
HSW_FLAGS = "fpu sse sse2 avx fma avx2"


def cpuinfo(n: int, flags: str, mhz: str | None = "2600.000",
            model: str = "Intel(R) Xeon(R) Processor") -> str:  # fmt: skip
    blocks = []
    for i in range(n):
        lines = [f"processor\t: {i}", "vendor_id\t: GenuineIntel", f"model name\t: {model}"]
        if mhz is not None:
            lines.append(f"cpu MHz\t\t: {mhz}")
        lines.append(f"flags\t\t: {flags}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# ------------------------------------------------------------------ peak (peak.py)


def test_peak_of_a_vm_with_avx512_and_no_cpufreq() -> None:
    # this VM's shape: 2 CPUs, cpu MHz 2600, AVX-512, no cpufreq: f = 2 x 2.6 = 5.2 GHz (turbo
    # allowance over the nominal reading), F = 2 FMA x 8 lanes x 2 = 32:
    # peak = 2 x 5.2 x 32 = 332.8 GFLOPS, bound = 1.25 x 332.8 = 416.0
    p = peak_from(cpuinfo(2, SPR_FLAGS), [], cpus=2, margin=1.25)
    assert (p.flop_per_cycle, p.isa) == (32, "avx512f")
    assert p.ghz == pytest.approx(5.2) and "cpu MHz 2600" in p.clock_source
    assert p.gflops == pytest.approx(332.8) and p.bound == pytest.approx(416.0)
    assert p.to_dict()["bound"] == p.bound and p.cpus == 2 and p.margin == 1.25


def test_peak_from_cpufreq_max_is_the_turbo_clock_itself() -> None:
    # a Zen 5 node: cpuinfo_max_freq 5.7 GHz (the largest of the CPUs' maxima), 16 threads:
    # 16 x 5.7 x 32 = 2918.4 GFLOPS; the idle `cpu MHz` 600 is not used
    p = peak_from(cpuinfo(16, ZEN5_FLAGS, mhz="600.000", model="AMD Ryzen 9 9950X"),
                  [5_500_000, 5_700_000], cpus=16, margin=1.0)  # fmt: skip
    assert p.ghz == pytest.approx(5.7) and p.clock_source == "cpufreq cpuinfo_max_freq"
    assert p.gflops == pytest.approx(2918.4) and p.bound == pytest.approx(2918.4)


def test_peak_from_the_model_names_clock_when_cpu_mhz_reads_low() -> None:
    # "@ 2.40GHz" beats an idle "cpu MHz 1000": f = 2 x 2.4 = 4.8; AVX2+FMA: F = 16;
    # 4 CPUs: 4 x 4.8 x 16 = 307.2
    text = cpuinfo(4, HSW_FLAGS, mhz="1000.000", model="Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.40GHz")
    p = peak_from(text, [], cpus=4, margin=1.25)
    assert p.ghz == pytest.approx(2 * 2.4) and "model name 2.40 GHz" in p.clock_source
    assert p.flop_per_cycle == 16 and p.gflops == pytest.approx(307.2)
    assert p.bound == pytest.approx(384.0)


def test_flop_per_cycle_per_instruction_set() -> None:
    assert flop_per_cycle({"avx512f", "avx2", "fma"}) == (32, "avx512f")
    assert flop_per_cycle({"avx", "avx2", "fma"}) == (16, "avx2")
    assert flop_per_cycle({"avx", "fma"}) == (16, "fma")  # Piledriver: FMA3 without AVX2
    assert flop_per_cycle({"avx", "sse2"}) == (8, "avx")  # Sandy Bridge: add + mul, no FMA
    assert flop_per_cycle({"sse2"}) == (4, "sse2")
    assert flop_per_cycle({"fp", "asimd", "sve"}) == (32, "sve")  # aarch64
    assert flop_per_cycle({"fp", "asimd"}) == (16, "asimd")
    assert flop_per_cycle(set()) == (64, "unknown")


def test_flags_are_those_every_cpu_lists_and_aarch64_features_count() -> None:
    mixed = cpuinfo(1, SPR_FLAGS) + "\n" + cpuinfo(1, HSW_FLAGS)
    assert "avx512f" not in cpu_flags(mixed) and {"avx2", "fma"} <= cpu_flags(mixed)
    arm = "processor\t: 0\nFeatures\t: fp asimd evtstrm sve\nCPU implementer\t: 0x41\n"
    assert {"asimd", "sve"} <= cpu_flags(arm) and cpu_flags("") == frozenset()


def test_no_clock_reported_assumes_a_clock_above_any_cpus() -> None:
    # an aarch64 VM: no cpufreq, no cpu MHz, no GHz in a model name; 1 CPU, SVE:
    # 1 x 6.5 x 32 = 208.0
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\n"
    assert clock_ghz(arm, []) == (ASSUMED_GHZ, "assumed (no clock reported)")
    assert peak_from(arm, [], cpus=1, margin=1.0).gflops == pytest.approx(ASSUMED_GHZ * 32)
    assert clock_ghz(cpuinfo(1, HSW_FLAGS, mhz="3000.000"), [0]) == (
        pytest.approx(NOMINAL_TURBO * 3.0), f"{NOMINAL_TURBO:g} x cpu MHz 3000.000")


# ------------------------------------------------------------------ reward shape (reward.py)

QS = [i / 100 for i in range(0, 501)]  # q in [0, 5]
REF_GFLOPS = 87.0  # raw is rewarded by g = q x g_ref


@pytest.mark.parametrize("shaping", ["scaled", "log", "raw"])
def test_reward_is_strictly_increasing_in_q_for_every_shaping(shaping) -> None:
    s = BenchSettings(shaping=shaping)
    rewards = [shaped_reward(q * REF_GFLOPS, q, s) for q in QS]
    assert all(b > a for a, b in itertools.pairwise(rewards)), shaping
    assert rewards[0] == 0.0


def test_reward_values_by_hand() -> None:
    s = BenchSettings()
    assert shaped_reward(30.0, 0.5, s) == pytest.approx(50.0)  # scaled: 100 q below 1
    assert shaped_reward(60.0, 1.0, s) == pytest.approx(100.0)
    assert shaped_reward(120.0, 2.0, s) == pytest.approx(150.0)  # 100 (2 - 1/2)
    assert shaped_reward(300.0, 5.0, s) == pytest.approx(180.0)  # 100 (2 - 1/5)
    assert shaped_reward(1e6, 1e4, s) < 200.0  # bounded by 200
    half = s.model_copy(update={"reward_scale": 0.5})
    assert shaped_reward(120.0, 2.0, half) == pytest.approx(75.0)
    log = s.model_copy(update={"shaping": "log"})
    assert shaped_reward(60.0, 1.0, log) == pytest.approx(100.0)  # 100 log10(10)
    assert shaped_reward(7.0, 1 / 9, log) == pytest.approx(100 * math.log10(2))
    assert shaped_reward(120.0, 2.0, log) == pytest.approx(100 * math.log10(19))  # 127.88
    raw = s.model_copy(update={"shaping": "raw", "reward_scale": 0.5})
    assert shaped_reward(30.0, 0.5, raw) == pytest.approx(15.0)
    assert shaped_reward(10.0, None, s) == 10.0  # no reference: raw


def test_scaled_is_continuous_with_a_continuous_slope_at_the_reference() -> None:
    s, h = BenchSettings(), 1e-6
    below = (shaped_reward(0, 1.0, s) - shaped_reward(0, 1.0 - h, s)) / h
    above = (shaped_reward(0, 1.0 + h, s) - shaped_reward(0, 1.0, s)) / h
    assert below == pytest.approx(100.0, rel=1e-4) and above == pytest.approx(100.0, rel=1e-4)


def test_the_issues_kernels_in_order_of_speed_get_rewards_in_that_order() -> None:
    """Issue 24's measured GFLOPS against a Haswell-kernel reference of 95 GFLOPS (its median
    87-103): naive 1.7, blocked 37.6, reordered 38.7, openmp 58.9, simd 76.9, AVX-512 152.2.
    The old 100 min(q, 1) with the 1.10 margin gave the AVX-512 kernel 0; now it earns the
    most, and none of them is suspicious under a 16-CPU node's peak."""
    s = BenchSettings()
    ref = 95.0
    bound = 1.25 * 16 * 5.7 * 32  # a Zen 5 node (test above): 3648 GFLOPS
    rewards = []
    for g in (1.7, 37.6, 38.7, 58.9, 76.9, 152.2):
        assert not is_suspicious(g, bound, ref, s)
        rewards.append(shaped_reward(g, g / ref, s))
    assert rewards == sorted(rewards) and len(set(rewards)) == len(rewards)
    assert rewards[-1] == pytest.approx(100 * (2 - ref / 152.2))  # q = 1.602: 137.6


def test_suspicious_only_above_the_peak_bound_unless_a_reference_margin_is_set() -> None:
    s = BenchSettings()
    assert s.reference_margin is None and s.peak_margin == 1.25
    assert not is_suspicious(1000.0, 1000.5, 50.0, s)  # 20 x the reference: not a reason
    assert is_suspicious(1001.0, 1000.0, 50.0, s)
    assert not is_suspicious(1e9, None, None, s)  # nothing to compare with
    opt_in = s.model_copy(update={"reference_margin": 1.1})
    assert is_suspicious(56.0, 1000.0, 50.0, opt_in) and not is_suspicious(54.0, 1000.0, 50.0,
                                                                            opt_in)  # fmt: skip


# ------------------------------------------------------------------ OpenBLAS core (reference.py)


def test_core_type_candidates_from_flags() -> None:
    assert coretype_candidates(SPR_FLAGS.split()) == ["SapphireRapids", "Cooperlake", "SkylakeX"]
    assert coretype_candidates(ZEN5_FLAGS.split()) == ["Cooperlake", "SkylakeX"]
    assert coretype_candidates(HSW_FLAGS.split()) == ["Haswell"]
    assert coretype_candidates(["sse2", "avx"]) == ["Sandybridge"]
    assert coretype_candidates(["sse2"]) == []
    # avx512f alone (Knights Landing, no BW/VL/DQ) is not the Skylake-X set
    assert cpu_level(["avx", "avx2", "fma", "avx512f", "avx512cd"]) == 2


def fake_openblas(mapping: dict[str, str]):
    """What an OpenBLAS build reports per OPENBLAS_CORETYPE ('' = its own choice); names it
    does not know give its own choice (as force_coretype's fallback does)."""
    calls: list[str] = []

    def corename(coretype: str) -> str:
        calls.append(coretype)
        return mapping.get(coretype, mapping[""])

    return corename, calls


def test_a_zen5_that_openblas_runs_as_haswell_gets_its_avx512_kernel() -> None:
    # the issue's machine: scipy-openblas maps Zen to Haswell, and Cooperlake to SkylakeX
    corename, calls = fake_openblas({"": "Haswell", "Cooperlake": "SkylakeX",
                                     "SkylakeX": "SkylakeX"})  # fmt: skip
    assert openblas_kernel(ZEN5_FLAGS.split(), corename) == ("SkylakeX", "SkylakeX")
    assert calls == ["", "Cooperlake", "SkylakeX"]


def test_openblas_own_choice_is_kept_at_the_cpus_level_and_the_environment_wins() -> None:
    corename, calls = fake_openblas({"": "SkylakeX", "SapphireRapids": "SapphireRapids"})
    assert openblas_kernel(SPR_FLAGS.split(), corename) == ("", "SkylakeX")  # level 3 already
    assert calls == [""]
    zen, _ = fake_openblas({"": "Zen", "Haswell": "Haswell"})
    assert openblas_kernel(HSW_FLAGS.split(), zen) == ("", "Zen")  # Zen is AVX2 + FMA too
    forced, calls = fake_openblas({"": "SkylakeX", "Haswell": "Haswell"})
    assert openblas_kernel(SPR_FLAGS.split(), forced, "Haswell") == ("Haswell", "Haswell")
    assert calls == ["Haswell"]  # the user's OPENBLAS_CORETYPE is not second-guessed
    silent, _ = fake_openblas({"": ""})  # not an OpenBLAS: no name, nothing forced
    assert openblas_kernel(SPR_FLAGS.split(), silent) == ("", "")


def test_corename_symbol_follows_the_cblas_symbols_prefix_and_suffix() -> None:
    assert corename_symbols("scipy_cblas_dgemm64_") == ["scipy_openblas_get_corename64_",
                                                         "openblas_get_corename"]  # fmt: skip
    assert corename_symbols("cblas_dgemm") == ["openblas_get_corename"]
