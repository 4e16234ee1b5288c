"""The model's per-GPU shapes: Kimi-K2.5 at TP=8 as docs/reference.md section 1 tabulates it, other
configs of the family, and ``kimitui shapes``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kimitui.bench.micro.shapes import KIMI_K25, ShapeError, load_config, quant_dtype, shapes_for, weight_bytes
from tests.support import ROOT

TINY = ROOT / "tests" / "fixtures" / "micro" / "tiny-deepseek-config.json"

REFERENCE_TP8 = [
    # (name, N, K, split, dtype, experts): docs/reference.md section 1, "Per-GPU decode GEMMs at TP=8"
    ("fused_qkv_a", 2112, 7168, "replicated", "bf16", 0),
    ("q_b_proj", 1536, 1536, "column", "bf16", 0),
    ("kv_b_proj", 2048, 512, "column", "bf16", 0),
    ("o_proj", 7168, 1024, "row", "bf16", 0),
    ("dense_gate_up", 4608, 7168, "column", "bf16", 0),
    ("dense_down", 7168, 2304, "row", "bf16", 0),
    ("shared_gate_up", 512, 7168, "column", "bf16", 0),
    ("shared_down", 7168, 256, "row", "bf16", 0),
    ("moe_w13", 512, 7168, "intermediate", "int4-g32", 384),
    ("moe_w2", 7168, 256, "intermediate", "int4-g32", 384),
    ("lm_head", 20480, 7168, "vocab-parallel", "bf16", 0),
]


def test_kimi_k25_at_tp8_matches_the_reference_table() -> None:
    plan = shapes_for(KIMI_K25, 8)
    assert [(g.name, g.n, g.k, g.split, g.dtype, g.experts) for g in plan.gemms] == REFERENCE_TP8
    calls = {g.name: (g.calls_per_token, g.topk) for g in plan.gemms}
    assert calls["o_proj"] == (61, 0) and calls["dense_down"] == (1, 0) and calls["moe_w13"] == (60, 8)
    assert calls["lm_head"] == (1, 0)
    ar = plan.step_allreduces
    assert ar.count_per_step == 122  # 2 per layer x 61 layers
    assert ar.bytes_at(1) == 14_336 and ar.bytes_at(128) == 1_835_008  # "14,336 B at M=1, 1.8 MB at M=128"
    assert [a.name for a in plan.allreduces[1:]] == ["embedding", "logits gather"]


def test_int4_only_where_the_checkpoint_quantizes() -> None:
    quant = KIMI_K25["quantization_config"]
    assert quant_dtype(quant, "language_model.model.layers.5.mlp.experts.17.down_proj") == "int4-g32"
    for module in ("language_model.model.layers.5.mlp.shared_experts.gate_proj", "model.layers.0.mlp.gate_proj",
                   "model.layers.3.self_attn.o_proj", "lm_head", "language_model.lm_head"):
        assert quant_dtype(quant, module) == "bf16", module
    assert quant_dtype(None, "model.layers.1.mlp.experts.0.gate_proj") == "bf16"
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert quant_dtype(fp8, "model.layers.1.self_attn.o_proj") == "fp8" and quant_dtype(fp8, "lm_head") == "bf16"
    # W4A16 g32: 0.5625 B per weight (docs/reference.md section 2)
    assert weight_bytes(512, 7168, "int4-g32") == 512 * 7168 * 0.5625
    assert weight_bytes(512, 7168, "bf16") == 512 * 7168 * 2


def test_an_hf_config_file_and_a_tp_that_does_not_divide(tmp_path: Path) -> None:
    plan = shapes_for(load_config(TINY), 2)
    g = {s.name: s for s in plan.gemms}
    assert (g["moe_w13"].n, g["moe_w13"].k, g["moe_w13"].dtype, g["moe_w13"].experts) == (128, 256, "int4-g32", 8)
    assert (g["q_b_proj"].n, g["o_proj"].k, g["lm_head"].n) == (2 * 48, 2 * 32, 512)
    assert plan.step_allreduces.count_per_step == 6
    # a multimodal config keeps the text model under text_config (Kimi-K2.5 itself does)
    nested = {"text_config": json.loads(TINY.read_text()), "_name": "nested"}
    assert [s.n for s in shapes_for(nested, 2).gemms] == [s.n for s in plan.gemms]
    with pytest.raises(ShapeError, match="num_attention_heads 4 is not divisible by TP 3"):
        shapes_for(load_config(TINY), 3)
    bad = tmp_path / "config.json"
    bad.write_text('{"hidden_size": 7168')
    with pytest.raises(ShapeError, match="not JSON"):
        load_config(bad)
    bad.write_text('{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2}')
    with pytest.raises(ShapeError, match="num_attention_heads"):
        shapes_for(load_config(bad), 8)


def _kimitui(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kimitui", *args], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def test_kimitui_shapes_prints_the_table_and_json(tmp_path: Path) -> None:
    out = _kimitui("shapes", "--tp", "8")
    assert out.returncode == 0, out.stderr
    assert "moe_w13" in out.stdout and "[384, 512, 7168]" in out.stdout and "int4-g32" in out.stdout
    assert "All-reduces per decode step: 122" in out.stdout and "14,336" in out.stdout
    data = json.loads(_kimitui("shapes", "--tp", "8", "--json", "--ms", "1,128").stdout)
    assert data["allreduce_bytes"] == {"1": 14336, "128": 1835008}
    assert {(g["name"], g["n"], g["k"]) for g in data["gemms"]} >= {("lm_head", 20480, 7168)}
    bad = _kimitui("shapes", "--tp", "8", "--config", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "missing.json" in bad.stderr
