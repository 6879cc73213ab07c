"""Tests for validation/ncu_csv.py (stdlib only; run with `python -m pytest validation/test_ncu_csv.py`)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ncu_csv  # noqa: E402

SAMPLE = """==PROF== Connected to process 1234 (/usr/bin/python3)
[ncu_step] something the program printed
==PROF== Disconnected from process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__registers_per_thread","sm__ops_path_tensor_src_bf16_dst_fp32.sum","lts__t_bytes.sum","sm__cycles_elapsed.avg.per_second"
"","","","","","","","","","","","Mbyte","%","usecond","register/thread","","Kbyte","Ghz"
"0","4242","python3","127.0.0.1","spin_kernel(long)","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","0.00","0.01","2.30","16","0","1.02","1.75"
"1","4242","python3","127.0.0.1","void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t>>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)","1","7","(128, 1, 1)","(16, 64, 4)","0","9.0","1,234.50","12.34","1,105.60","255","34,359,738,368","2,048.00","1.98"
"2","4242","python3","127.0.0.1","spin_kernel(long)","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","0.00","n/a","2.10","16","0","1.00","1.75"
"3","4242","python3","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<bool>, std::array<char*, 1ul>>(int, at::native::FillFunctor<bool>, std::array<char*, 1ul>)","1","7","(128, 1, 1)","(2048, 1, 1)","0","9.0","0.00","3.00","2.00","18","0","4.00","1.80"
"""


def test_parse_units_and_numbers():
    t = ncu_csv.parse(SAMPLE)
    assert len(t) == 4
    assert t.units["dram__bytes_read.sum"] == "Mbyte"
    assert t.units["Kernel Name"] == ""
    r = t.rows[1]
    assert r["ID"] == 1 and r["Process ID"] == 4242
    assert r["dram__bytes_read.sum"] == 1234.5
    assert r["gpu__time_duration.sum"] == 1105.6
    assert r["sm__ops_path_tensor_src_bf16_dst_fp32.sum"] == 34359738368
    assert isinstance(r["sm__ops_path_tensor_src_bf16_dst_fp32.sum"], int)
    assert r["Block Size"] == "(128, 1, 1)"
    assert r["Kernel Name"].startswith("void pytorch_flash::flash_fwd_kernel")
    assert t.rows[2]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] is None
    assert "ID" not in t.metric_columns() and "gpu__time_duration.sum" in t.metric_columns()


def test_base_units():
    rows = ncu_csv.kernels(SAMPLE, base_units=True)
    r = rows[1]
    assert abs(r["dram__bytes_read.sum"] - 1234.5e6) < 1
    assert abs(r["gpu__time_duration.sum"] - 1105.6e-6) < 1e-12
    assert abs(r["lts__t_bytes.sum"] - 2048e3) < 1e-6
    assert abs(r["sm__cycles_elapsed.avg.per_second"] - 1.98e9) < 1
    assert r["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == 12.34  # % untouched
    t = ncu_csv.parse(SAMPLE, base_units=True)
    assert t.units["dram__bytes_read.sum"] == "byte"
    assert t.units["gpu__time_duration.sum"] == "second"
    assert t.units["sm__cycles_elapsed.avg.per_second"] == "hz"


def test_unit_scale():
    assert ncu_csv.unit_scale("nsecond") == (1e-9, "second")
    assert ncu_csv.unit_scale("byte") == (1.0, "byte")
    assert ncu_csv.unit_scale("Gbyte/second") == (1e9, "byte/second")
    assert ncu_csv.unit_scale("KiB") == (1.0, "KiB")  # unknown spelling stays as is
    assert ncu_csv.unit_scale("Kibyte") == (1024.0, "byte")
    assert ncu_csv.unit_scale("%") == (1.0, "%")
    assert ncu_csv.unit_scale("register/thread") == (1.0, "register/thread")
    # short spellings printed by `ncu --print-units base` (2025.3)
    assert ncu_csv.unit_scale("ns") == (1e-9, "second")
    assert ncu_csv.unit_scale("byte/s") == (1.0, "byte/second")
    assert ncu_csv.unit_scale("inst/cycle") == (1.0, "inst/cycle")


def test_to_number():
    assert ncu_csv.to_number("1,048,576") == 1048576
    assert ncu_csv.to_number("-3.5e+02") == -350.0
    assert ncu_csv.to_number(".5") == 0.5
    assert ncu_csv.to_number("n/a") is None
    assert ncu_csv.to_number("(128, 1, 1)") == "(128, 1, 1)"
    assert ncu_csv.to_number("1,2") == "1,2"  # not a thousands-grouped number


def test_split_by_marker_and_short_name():
    rows = ncu_csv.kernels(SAMPLE)
    parts = ncu_csv.split_by_marker(rows, ["sdpa_flash_fwd_causal", "other"])
    assert [r["ID"] for r in parts["sdpa_flash_fwd_causal"]] == [1]
    assert [r["ID"] for r in parts["other"]] == [3]
    assert ncu_csv.short_name(rows[1]["Kernel Name"]) == "flash_fwd_kernel"
    assert ncu_csv.short_name(rows[3]["Kernel Name"]) == "vectorized_elementwise_kernel"
    assert (
        ncu_csv.short_name("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT")
        == "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    )
    assert ncu_csv.short_name("triton_red_fused__softmax_0") == "triton_red_fused__softmax_0"


def test_no_header_raises():
    try:
        ncu_csv.parse("==PROF== nothing profiled\n")
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_nvtx_column():
    assert ncu_csv.nvtx_column(["ID", "thread Domain:Push/Pop_Range:PL_Type"]) == "thread Domain:Push/Pop_Range:PL_Type"
    assert ncu_csv.nvtx_column(["ID", "Kernel Name"]) is None
