import json

import pytest

from tb_attention_plugin.roofline import devices as D


def res(name, mem=80 * 2**30, **extra):
    return D.resolve({"deviceProperties": [dict(id=0, name=name, totalGlobalMem=mem, **extra)]}, 0)


@pytest.mark.parametrize(
    "name,mem,key",
    [
        ("NVIDIA H200", 141e9, "H200-SXM"),
        ("NVIDIA H200 NVL", 141e9, "H200-NVL"),
        ("NVIDIA H100 80GB HBM3", 80e9, "H100-SXM"),
        ("NVIDIA H100 PCIe", 80e9, "H100-PCIe"),
        ("NVIDIA H100 NVL", 94e9, "H100-NVL"),
        ("NVIDIA A100-SXM4-40GB", 40e9, "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", 80e9, "A100-80GB"),
        ("NVIDIA A100-PG509-200", 42e9, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 80e9, "A100-PCIe-80GB"),
        ("Tesla V100-SXM2-32GB", 32e9, "V100-SXM2"),
        ("Tesla V100-PCIE-16GB", 16e9, "V100-PCIe"),
        ("NVIDIA L4", 24e9, "L4"),
        ("NVIDIA A10", 24e9, "A10"),
        ("NVIDIA L40S", 48e9, "L40S"),
        ("NVIDIA GeForce RTX 4090", 24e9, "RTX4090"),
        ("AMD Instinct MI300X", 192e9, "MI300X"),
        ("NVIDIA B200", 180e9, "B200"),
        ("NVIDIA GB200", 186e9, "GB200"),
        ("NVIDIA B100", 192e9, "B100"),
        ("NVIDIA H20", 96e9, "H20"),
        ("NVIDIA H800", 80e9, "H800"),
        ("NVIDIA L40", 48e9, "L40"),
        ("NVIDIA A30", 24e9, "A30"),
        ("NVIDIA A40", 48e9, "A40"),
        ("NVIDIA GeForce RTX 3090", 24e9, "RTX3090"),
        ("NVIDIA GeForce RTX 4080", 16e9, "RTX4080"),
        ("NVIDIA GeForce RTX 5090", 32e9, "RTX5090"),
        ("NVIDIA RTX 6000 Ada Generation", 48e9, "RTX6000Ada"),
        ("NVIDIA RTX A6000", 48e9, "RTXA6000"),
        ("AMD Instinct MI325X", 256e9, "MI325X"),
        ("AMD Instinct MI355X", 288e9, "MI355X"),
        ("AMD Instinct MI210", 64e9, "MI250-GCD"),
    ],
)
def test_table_lookup(name, mem, key):
    d = res(name, mem)
    assert d.key == key and d.known
    assert all(d.sources[k] for k in list(d.flops) + ["memory_bandwidth"])


def test_h200_uses_measured_peaks_by_default_and_datasheet_on_request():
    d = res("NVIDIA H200")
    assert d.basis == "measured"
    assert d.flops["fp32"] == 50.5e12 and d.flops["tf32"] == 440.3e12 and d.flops["fp8"] == 1467e12
    ds = D.resolve({"deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}, 0, basis="datasheet")
    assert ds.flops["bf16"] == pytest.approx(989.4e12) and ds.memory_bandwidth == 4.8e12
    assert ds.adjustments == []


def test_a_benchmark_beaten_by_a_real_kernel_is_no_roof():
    """The H200's bf16 benchmark (801.5 TFLOP/s at 8192^3) is beaten by GEMMs with exact FLOPs (up
    to 926 TFLOP/s on recorded traces), its copy benchmark (4.24 TB/s) by DRAM traffic Nsight
    Compute measured (4.42 TB/s): their roofs are the datasheet's, each raise listed with its
    evidence; the benchmarks nobody beat stay."""
    d = res("NVIDIA H200")
    assert d.flops["bf16"] == d.flops["fp16"] == pytest.approx(989.4e12) and d.memory_bandwidth == 4.8e12
    got = {a["peak"]: a for a in d.adjustments}
    assert set(got) == {"bf16", "fp16", "memory_bandwidth"}
    assert (got["bf16"]["from"], got["bf16"]["to"]) == (801.5e12, pytest.approx(989.4e12))
    assert (got["memory_bandwidth"]["from"], got["memory_bandwidth"]["to"]) == (4.24e12, 4.8e12)
    assert all(a["evidence"] == "recorded" and a["to_basis"] == "datasheet" for a in d.adjustments)
    assert "926 TFLOP/s" in got["bf16"]["reason"] and "4.42 TB/s" in got["memory_bandwidth"]["reason"]
    assert "no ceiling" in d.sources["bf16"] and "Nsight Compute" in d.sources["memory_bandwidth"]
    assert d.to_json()["roof_adjustments"] == d.adjustments
    # a user's figure wins over the table's evidence
    u = D.resolve({"deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}, 0, D.load_user_peaks("bf16=850"))
    assert u.flops["bf16"] == 850e12 and {a["peak"] for a in u.adjustments} == {"fp16", "memory_bandwidth"}


def test_generic_amd_name_by_architecture():
    d = res("AMD Radeon Graphics", 64 * 2**30, computeMajor=9, computeMinor=0, numSms=104)
    assert d.key == "MI250-GCD" and d.memory_bandwidth == 1.6e12


@pytest.mark.parametrize(
    "name,mem,cc,sms,warp,key",
    [
        # MI300X under virtualisation: no name, the properties say gfx942 with 304 CUs and 192 GB
        ("", 191.98e9, (9, 4), 304, 64, "MI300X"),
        ("AMD Radeon Graphics", 256e9, (9, 4), 304, 64, "MI325X"),
        ("", 288e9, (9, 5), 256, 64, "MI355X"),
        ("", 64 * 2**30, (9, 0), 104, 64, "MI250-GCD"),
        ("NVIDIA Graphics Device", 179 * 2**30, (10, 0), 148, 32, "B200"),
        ("", 80e9, (9, 0), 132, 32, "H100-SXM"),
        ("", 143e9, (9, 0), 132, 32, "H200-SXM"),
        ("", 96e9, (9, 0), 78, 32, "H20"),
        ("", 80e9, (8, 0), 108, 32, "A100-80GB"),
    ],
)
def test_unnamed_or_generic_device_by_its_properties(name, mem, cc, sms, warp, key):
    d = res(name, mem, computeMajor=cc[0], computeMinor=cc[1], numSms=sms, warpSize=warp)
    assert d.key == key and d.known
    assert f"{cc[0]}.{cc[1]}" in d.matched_by and str(sms) in d.matched_by


def test_an_unnamed_amd_device_gets_no_cuda_occupancy_limits():
    props = dict(name="", computeMajor=9, computeMinor=0, numSms=104, warpSize=64)
    assert D.sm_limits(props) is None
    assert D.sm_limits(dict(name="", computeMajor=9, computeMinor=0, numSms=132, warpSize=32)) is not None


def test_a_shared_signature_is_not_guessed():
    """L40, L40S and RTX 6000 Ada all report 8.9 with 142 SMs and 48 GB: no pick among them."""
    d = res("", 48e9, computeMajor=8, computeMinor=9, numSms=142, warpSize=32)
    assert d.key is None and not d.known


def test_every_entry_has_an_architecture_or_is_amd():
    for e in D.table():
        assert e["key"] in D._ARCH_OF_KEY or e["key"].startswith("MI"), e["key"]
    for sig in D._SIGNATURES:
        assert sig.key in {e["key"] for e in D.table()}


def test_unknown_gpu_and_user_peaks(tmp_path):
    d = res("Some Future GPU")
    assert not d.known and d.basis == "unknown"
    user = D.load_user_peaks("bf16=500,fp32=40,memory=3")
    d = D.resolve({"deviceProperties": [{"id": 0, "name": "Some Future GPU"}]}, 0, user)
    assert d.known and d.flops["bf16"] == 500e12 and d.memory_bandwidth == 3e12 and d.basis == "user"
    f = tmp_path / "p.json"
    f.write_text(json.dumps([{"match": "Future", "flops": {"fp16": 1e15}, "memory_bandwidth": 2e12}]))
    d = D.resolve({"deviceProperties": [{"id": 0, "name": "Some Future GPU"}]}, 0, D.load_user_peaks(str(f)))
    assert d.flops["fp16"] == 1e15
    with pytest.raises(ValueError):
        D.load_user_peaks("bogus=1")


def test_legacy_compute_properties_key():
    d = D.resolve({"computeProperties": [{"id": 0, "name": "Tesla V100-DGXS-32GB"}]}, 0)
    assert d.key == "V100-SXM2"


def test_h200_fp8_peak_is_the_measured_scaled_mm_with_its_own_source():
    d = res("NVIDIA H200")
    assert d.flops["fp8"] == 1467e12
    assert "_scaled_mm" in d.sources["fp8"] and "e4m3" in d.sources["fp8"]
    assert d.sources["bf16"] != d.sources["fp8"]
    ds = D.resolve({"deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}, 0, basis="datasheet")
    assert ds.flops["fp8"] == pytest.approx(1978.9e12) and "datasheet" in ds.sources["fp8"]
