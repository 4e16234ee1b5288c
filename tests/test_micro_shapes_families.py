"""``kimitui shapes`` for every family it knows (issue 35 items 1-2): the presets hold their published
parameter counts (a count that disagrees means a shape is wrong), and a small config of each family under
tests/fixtures/shapes/ gives, through ``kimitui shapes --config PATH --json``, the per-GPU GEMMs computed by
hand here from vLLM's layers (QKVParallelLinear, MergedColumnParallelLinear, RowParallelLinear, FusedMoE,
ReplicatedLinear, ParallelLMHead with the vocab padded to 64) at TP=1 and TP=8."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kimitui.bench.micro.presets import PRESETS, preset
from kimitui.bench.micro.shapes import ShapeError, quant_dtype, shapes_for, weight_bytes
from kimitui.commands.main import main
from tests.support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "shapes"

PUBLISHED = {
    # name: (total, active or None), as the publishers give them (docs/reference.md section 5)
    "kimi-k2.5": (1.04e12, 32e9),
    "glm-5": (744e9, 40e9),
    "deepseek-v3": (671e9, 37e9),
    "qwen3-235b-a22b": (235e9, 22e9),
    "llama-3.1-70b": (70.6e9, None),
    "gpt-oss-120b": (117e9, 5.1e9),
}
TOTAL_TOL, ACTIVE_TOL = 0.02, 0.025
"""What the presets give (2026-12-04): totals 1026.4B (-1.3 %), 743.9B (-0.0 %), 671.0B (+0.0 %), 235.1B
(+0.0 %), 70.55B (-0.1 %), 116.8B (-0.2 %); active 31.7B (-1.0 %), 40.8B (+2.1 %: Zhipu's "40B" rounds
down, as its GLM-4.5 "32B" does 32.9B), 36.6B (-1.0 %), 21.6B (-2.0 %), -, 5.13B (+0.6 %). Active leaves
out the input embedding table (a token reads one row of it), as gpt-oss's model card counts it (5.13B;
5.7B with the table)."""


def shapes_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    rc = main(["shapes", "--json", *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    data: dict[str, Any] = json.loads(out.out)
    return data


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_preset_holds_its_published_parameter_counts(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = shapes_json(capsys, "--model", name, "--tp", "8")
    total, active = PUBLISHED[name]
    assert abs(data["params_total"] / total - 1) <= TOTAL_TOL, data["params_total"]
    if active is not None:
        assert abs(data["params_active"] / active - 1) <= ACTIVE_TOL, data["params_active"]
    assert data["params_active"] <= data["params_total"]
    assert data["tp"] == 8 and data["gemms"]


def test_presets_name_their_source_and_are_copies() -> None:
    text = (ROOT / "kimitui" / "bench" / "micro" / "presets.py").read_text()
    for name, cfg in PRESETS.items():
        assert cfg.get("_name") and (name == "kimi-k2.5" or f"huggingface.co/{cfg['_name']}" in text), name
    preset("glm-5")["hidden_size"] = 1
    assert PRESETS["glm-5"]["hidden_size"] == 6144
    with pytest.raises(ShapeError, match=r"presets: kimi-k2\.5, glm-5"):
        preset("llama-4")


def test_preset_shapes_at_tp8() -> None:
    def nk(name: str, **kw: Any) -> dict[str, tuple[int, ...]]:
        plan = shapes_for(preset(name), 8, **kw)
        return {g.name: ((g.experts,) if g.experts else ()) + (g.n, g.k) for g in plan.gemms}

    llama = nk("llama-3.1-70b")  # 64 q / 8 kv heads of 128: 8 + 2 x 1 heads per GPU
    assert llama["qkv_proj"] == (1280, 8192) and llama["o_proj"] == (8192, 1024)
    assert llama["gate_up_proj"] == (7168, 8192) and llama["down_proj"] == (8192, 3584)
    assert llama["lm_head"] == (16032, 8192)
    qwen = nk("qwen3-235b-a22b")  # 4 kv heads on 8 GPUs: each GPU holds one (replicated)
    assert qwen["qkv_proj"] == ((8 + 2) * 128, 4096) and qwen["moe_w13"] == (128, 384, 4096)
    assert qwen["moe_w2"] == (128, 4096, 192) and qwen["router"] == (128, 4096)
    oss = shapes_for(preset("gpt-oss-120b"), 8)
    g = {s.name: s for s in oss.gemms}
    assert (g["moe_w13"].n, g["moe_w13"].dtype, g["qkv_proj"].dtype, g["router"].dtype) == (720, "mxfp4", "bf16",
                                                                                             "bf16")
    assert oss.step_allreduces.count_per_step == 72
    dsv3 = shapes_for(preset("deepseek-v3"), 8)
    d = {s.name: s for s in dsv3.gemms}
    assert (d["q_b_proj"].n, d["o_proj"].k, d["moe_w13"].experts, d["moe_w13"].dtype) == (16 * 192, 16 * 128, 256,
                                                                                          "fp8")
    assert d["lm_head"].dtype == "bf16" and d["dense_down"].calls_per_token == 3
    glm5 = nk("glm-5", expert_parallel=True)  # 256 experts whole, 32 a GPU
    assert glm5["moe_w13"] == (32, 4096, 6144) and glm5["moe_w2"] == (32, 6144, 2048)
    assert glm5["kv_b_proj"] == (8 * (192 + 256), 512) and glm5["indexer_wq_b"] == (32 * 128, 2048)


# (fixture, tp, {name: (experts?, n, k[, dtype])}, all-reduces per step): computed by hand from the fixture
FAMILY_CASES = [
    ("llama-tiny.json", 1, {"qkv_proj": (768, 512), "o_proj": (512, 512), "gate_up_proj": (3072, 512),
                            "down_proj": (512, 1536), "lm_head": (1024, 512)}, 0),  # vocab 1000 padded to 1024
    ("llama-tiny.json", 8, {"qkv_proj": ((2 + 2) * 32, 512), "o_proj": (512, 64), "gate_up_proj": (384, 512),
                            "down_proj": (512, 192), "lm_head": (128, 512)}, 8),
    ("qwen2-tiny.json", 1, {"qkv_proj": (768, 256), "o_proj": (256, 256), "gate_up_proj": (1024, 256),
                            "down_proj": (256, 512), "lm_head": (512, 256)}, 0),
    ("qwen2-tiny.json", 8, {"qkv_proj": (96, 256), "o_proj": (256, 32), "gate_up_proj": (128, 256),
                            "down_proj": (256, 64), "lm_head": (64, 256)}, 4),
    ("mistral3-multimodal-tiny.json", 1, {"qkv_proj": (1536, 512, "int4-g128"), "o_proj": (512, 512, "int4-g128"),
                                          "gate_up_proj": (2048, 512), "down_proj": (512, 1024),
                                          "lm_head": (2048, 512, "bf16")}, 0),
    ("mistral3-multimodal-tiny.json", 8, {"qkv_proj": (192, 512), "o_proj": (512, 64), "gate_up_proj": (256, 512),
                                          "down_proj": (512, 128, "int4-g128"), "lm_head": (256, 512)}, 4),
    ("qwen3-moe-tiny.json", 1, {"qkv_proj": (768, 256), "o_proj": (256, 512), "dense_gate_up": (1024, 256),
                                "dense_down": (256, 512), "router": (16, 256), "moe_w13": (16, 256, 256),
                                "moe_w2": (16, 256, 128), "lm_head": (1024, 256)}, 0),
    ("qwen3-moe-tiny.json", 8, {"qkv_proj": (128, 256), "o_proj": (256, 64), "dense_gate_up": (128, 256),
                                "dense_down": (256, 64), "router": (16, 256), "moe_w13": (16, 32, 256),
                                "moe_w2": (16, 256, 16), "lm_head": (128, 256)}, 8),
    ("mixtral-gptq-tiny.json", 1, {"qkv_proj": (384, 256, "int4-g128"), "o_proj": (256, 256, "int4-g128"),
                                   "router": (8, 256, "bf16"), "moe_w13": (8, 1024, 256, "int4-g128"),
                                   "moe_w2": (8, 256, 512, "int4-g128"), "lm_head": (1024, 256, "bf16")}, 0),
    ("mixtral-gptq-tiny.json", 8, {"qkv_proj": (96, 256), "o_proj": (256, 32), "router": (8, 256),
                                   "moe_w13": (8, 128, 256), "moe_w2": (8, 256, 64), "lm_head": (128, 256)}, 4),
    ("glm4-moe-fp8-tiny.json", 1, {"qkv_proj": (640, 256, "fp8"), "o_proj": (256, 512, "fp8"),
                                   "dense_gate_up": (1024, 256), "dense_down": (256, 512),
                                   "router": (16, 256, "bf16"), "shared_gate_up": (128, 256, "fp8"),
                                   "shared_down": (256, 64), "moe_w13": (16, 128, 256, "fp8"),
                                   "moe_w2": (16, 256, 64), "lm_head": (1024, 256, "bf16")}, 0),
    ("glm4-moe-fp8-tiny.json", 8, {"qkv_proj": (128, 256), "o_proj": (256, 64), "dense_gate_up": (128, 256),
                                   "dense_down": (256, 64), "router": (16, 256), "shared_gate_up": (16, 256),
                                   "shared_down": (256, 8), "moe_w13": (16, 16, 256), "moe_w2": (16, 256, 8),
                                   "lm_head": (128, 256)}, 6),
    ("glm5-tiny.json", 1, {"fused_qkv_a": (208, 256), "q_b_proj": (512, 128), "kv_b_proj": (640, 64),
                           "indexer_wq_b": (128, 128), "indexer_wk": (32, 256), "indexer_weights": (4, 256),
                           "o_proj": (256, 256), "dense_gate_up": (1024, 256), "dense_down": (256, 512),
                           "router": (16, 256), "shared_gate_up": (128, 256), "shared_down": (256, 64),
                           "moe_w13": (16, 128, 256), "moe_w2": (16, 256, 64), "lm_head": (1024, 256)}, 0),
    ("glm5-tiny.json", 8, {"fused_qkv_a": (208, 256), "q_b_proj": (64, 128), "kv_b_proj": (80, 64),
                           "indexer_wq_b": (128, 128), "indexer_wk": (32, 256), "indexer_weights": (4, 256),
                           "o_proj": (256, 32), "dense_gate_up": (128, 256), "dense_down": (256, 64),
                           "router": (16, 256), "shared_gate_up": (16, 256), "shared_down": (256, 8),
                           "moe_w13": (16, 16, 256), "moe_w2": (16, 256, 8), "lm_head": (128, 256)}, 6),
    ("gpt-oss-tiny.json", 1, {"qkv_proj": (1024, 256, "bf16"), "o_proj": (256, 512, "bf16"),
                              "router": (16, 256, "bf16"), "moe_w13": (16, 512, 256, "mxfp4"),
                              "moe_w2": (16, 256, 256, "mxfp4"), "lm_head": (1024, 256, "bf16")}, 0),
    ("gpt-oss-tiny.json", 8, {"qkv_proj": (128, 256), "o_proj": (256, 64), "router": (16, 256),
                              "moe_w13": (16, 64, 256), "moe_w2": (16, 256, 32), "lm_head": (128, 256)}, 4),
]


@pytest.mark.parametrize("fixture,tp,expected,allreduces", FAMILY_CASES,
                         ids=[f"{c[0].removesuffix('.json')}-tp{c[1]}" for c in FAMILY_CASES])
def test_a_config_of_each_family(fixture: str, tp: int, expected: dict[str, tuple[Any, ...]], allreduces: int,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    data = shapes_json(capsys, "--config", str(FIXTURES / fixture), "--tp", str(tp))
    got = {g["name"]: g for g in data["gemms"]}
    assert list(got) == list(expected), "the GEMMs and their order"
    for name, want in expected.items():
        g = got[name]
        dtype = want[-1] if isinstance(want[-1], str) else None
        dims = want[:-1] if dtype else want
        have = ((g["experts"],) if g["experts"] else ()) + (g["n"], g["k"])
        assert have == dims, name
        if dtype:
            assert g["dtype"] == dtype, name
    assert data["allreduces"][0]["count_per_step"] == allreduces


def test_hand_counted_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    llama = shapes_json(capsys, "--config", str(FIXTURES / "llama-tiny.json"), "--tp", "8")
    # per layer: qkv 768x512 + o 512x512 + gate, up, down 3x512x1536 + 2 norms of 512; the final norm;
    # the embedding and lm_head 1000 x 512 each (lm_head's padding to 1024 rows is no parameter)
    layer = 768 * 512 + 512 * 512 + 3 * 512 * 1536 + 2 * 512
    assert llama["params_total"] == 4 * layer + 512 + 2 * 1000 * 512
    assert llama["params_active"] == llama["params_total"] - 1000 * 512 == llama["params_total"] - llama[
        "params_embedding"]
    qwen2 = shapes_json(capsys, "--config", str(FIXTURES / "qwen2-tiny.json"), "--tp", "1")  # tied, QKV bias
    layer = 768 * 256 + 768 + 256 * 256 + 3 * 256 * 512 + 2 * 256
    assert qwen2["params_total"] == qwen2["params_active"] == 2 * layer + 256 + 512 * 256
    moe = shapes_json(capsys, "--config", str(FIXTURES / "qwen3-moe-tiny.json"), "--tp", "8")
    attn = 768 * 256 + 256 * 512 + 2 * 256 + 2 * 32  # q_norm, k_norm
    expert = 3 * 256 * 128
    common = 4 * attn + 3 * 256 * 512 + 3 * 16 * 256 + 256 + 1024 * 256  # + dense layer 0, routers, norm, lm_head
    assert moe["params_total"] == common + 3 * 16 * expert + 1024 * 256
    assert moe["params_active"] == common + 3 * 4 * expert
    oss = shapes_json(capsys, "--config", str(FIXTURES / "gpt-oss-tiny.json"), "--tp", "8")
    attn = 1024 * 256 + 1024 + 256 * 512 + 256 + 2 * 256 + 16  # biases, norms, 16 sinks
    expert = 512 * 256 + 512 + 256 * 256 + 256  # gate_up and down with their biases
    common = 2 * (attn + 16 * 256 + 16) + 256 + 1024 * 256  # router with its bias
    assert oss["params_total"] == common + 2 * 16 * expert + 1024 * 256
    assert oss["params_active"] == common + 2 * 4 * expert


def test_expert_parallel_splits_experts_whole(capsys: pytest.CaptureFixture[str]) -> None:
    data = shapes_json(capsys, "--config", str(FIXTURES / "qwen3-moe-tiny.json"), "--tp", "8", "--expert-parallel")
    got = {g["name"]: g for g in data["gemms"]}
    assert (got["moe_w13"]["experts"], got["moe_w13"]["n"], got["moe_w13"]["k"]) == (2, 256, 256)
    assert (got["moe_w2"]["experts"], got["moe_w2"]["n"], got["moe_w2"]["k"], got["moe_w2"]["split"]) == (
        2, 256, 128, "expert")
    assert got["qkv_proj"]["n"] == 128 and data["expert_parallel"] is True  # attention stays TP
    rc = main(["shapes", "--config", str(FIXTURES / "mixtral-gptq-tiny.json"), "--tp", "16", "--expert-parallel"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "num_attention_heads 8 is not divisible by TP 16" in err
    with pytest.raises(ShapeError, match=r"experts \(expert parallel\) 8 is not divisible by TP 16"):
        shapes_for({**preset("gpt-oss-120b"), "num_local_experts": 8}, 16, expert_parallel=True)


def test_an_unknown_architecture_is_one_line_naming_the_families(tmp_path: Any,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text('{"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544}')
    rc = main(["shapes", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "'falcon' (FalconForCausalLM) is not a known family" in err
    for family in ("Llama", "Qwen3-MoE", "Mixtral", "DeepSeek-V3", "glm4_moe", "glm_moe_dsa", "gpt_oss"):
        assert family in err
    # a config naming only its architecture is read by it
    only_arch = json.loads((FIXTURES / "llama-tiny.json").read_text())
    del only_arch["model_type"]
    assert shapes_for(only_arch, 8).family == "llama"


def test_quantized_only_where_the_checkpoint_says() -> None:
    oss = preset("gpt-oss-120b")["quantization_config"]
    assert quant_dtype(oss, "model.layers.3.mlp.experts.gate_up_proj") == "mxfp4"
    for module in ("model.layers.3.self_attn.q_proj", "model.layers.3.mlp.router", "lm_head"):
        assert quant_dtype(oss, module) == "bf16", module
    ct_fp8 = {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
              "config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}}}
    assert quant_dtype(ct_fp8, "model.layers.0.mlp.down_proj") == "fp8" and quant_dtype(ct_fp8, "lm_head") == "bf16"
    awq = {"quant_method": "awq", "bits": 4, "group_size": 128, "modules_to_not_convert": ["self_attn"]}
    assert quant_dtype(awq, "model.layers.0.self_attn.q_proj") == "bf16"
    assert quant_dtype(awq, "model.layers.0.mlp.gate_proj") == "int4-g128" and quant_dtype(awq, "lm_head") == "bf16"
    # MXFP4: half a byte a weight, one byte of scale per 32
    assert weight_bytes(720, 2880, "mxfp4") == 720 * 2880 // 2 + 720 * 2880 // 32


def test_the_micro_worker_plans_every_preset() -> None:
    """The GEMM worker's plan (kimitui/hostside/gemm_rows.py) takes every preset's shapes: bf16 and intN-gG
    measured, MXFP4 and FP8 listed as not benchmarked, a fused-MoE item where the experts are measured."""
    from kimitui.hostside.gemm_rows import plan_items

    for name in PRESETS:
        items, skipped = plan_items([g.to_dict() for g in shapes_for(preset(name), 8).gemms],
                                    ["marlin", "torch-int4", "bf16"])
        assert any(i["name"] == "lm_head" for i in items), name
        kinds = {i["kind"] for i in items}
        if name in ("gpt-oss-120b", "deepseek-v3"):
            assert "moe_w13: dtype " in "\n".join(skipped) and kinds == {"dense"}, name
        else:
            assert not skipped and kinds == ({"dense"} if name == "llama-3.1-70b" else {"dense", "moe"}), name


def test_a_qwen3_moe_config_as_transformers_5_saves_it() -> None:
    """transformers 5 writes a Qwen3-MoE config's expert count as ``num_local_experts`` (its config class reads
    either name): the fixture is Qwen3-30B-A3B's shapes on one layer, saved by transformers 5.25
    (scripts/make_random_model.py), and gives the shapes the ``num_experts`` spelling gives."""
    saved = json.loads((FIXTURES / "qwen3-30b-a3b-1layer-transformers5.json").read_text())
    assert "num_experts" not in saved and saved["num_local_experts"] == 128
    plan = shapes_for(saved, 4)
    spelled = {k: v for k, v in saved.items() if k != "num_local_experts"} | {"num_experts": 128}
    assert [g.to_dict() for g in plan.gemms] == [g.to_dict() for g in shapes_for(spelled, 4).gemms]
    moe = {g.name: g for g in plan.gemms}
    assert (moe["moe_w13"].experts, moe["moe_w13"].n, moe["moe_w13"].k) == (128, 2 * 768 // 4, 2048)
    assert (moe["qkv_proj"].n, moe["o_proj"].k) == ((32 + 2 * 4) * 128 // 4, 32 * 128 // 4)
