"""The leave-one-out reader of Liger's own patches, its miss categories and its NOTES.md section."""

from __future__ import annotations

import pytest

from benchmarks import leave_one_out_decisions as loo


@pytest.fixture(scope="module")
def read(liger_template):
    reader = loo.LigerReader(liger_template)
    functions = loo.registry(reader.monkey_patch)
    return lambda model_type: reader.read(model_type, functions[model_type])


def test_llama4_text_patch_is_read_without_its_vision_tower(read):
    patch = read("llama4_text")
    assert patch.values["norm_type"] == "rms"  # the shared function's LayerNorm calls are on vision_model
    assert patch.values["rope"] == "llama4"  # installed by apply_liger_llama4_rope_full(modeling_llama4)
    assert patch.values["structure"] == "moe"  # no experts kernel, but it patches is_moe_layer / shared_expert


def test_structure_comes_from_experts_not_from_the_word(read):
    assert read("gpt_oss").values["structure"] == "moe"  # its lce_forward carries aux_loss
    assert read("qwen3_5_text").values["structure"] == "dense"  # LigerQwen3MoeSwiGLUMLP on a dense MLP
    assert read("qwen3_moe").values["structure"] == "moe"
    assert read("llama").values["structure"] == "dense"


def test_norm_calls_through_a_local_helper_and_getattr_are_read(read):
    attrs = read("gemma4_text").values["norm_attrs"]
    assert {"input_layernorm", "post_attention_layernorm"} <= set(attrs["decoder"])
    assert {"q_norm", "k_norm"} <= set(attrs["attn"]) and attrs["final"] == "norm"


def test_class_level_swap_covers_attention_norms(read):
    patch = read("olmo2")
    assert patch.values["norm_attrs"]["attn"] == ["k_norm", "q_norm"]  # only the class swap reaches them
    assert "class-level swap" in patch.lines["norm_attrs"]
    assert patch.values["rms_in_place"] is False


def test_misses_are_categorized_with_evidence(liger_template):
    result = loo.evaluate(liger_template, ["olmo2", "nemotron"])
    misses = {(r["model"], r["decision"]): r for r in result["rows"] if not r["agree"]}
    casting = misses[("olmo2", "rms_casting_mode")]
    assert casting["category"] == "liger-approximates" and "rms/llama/offset=0 off by bf16" in casting["explanation"]
    rope = misses[("nemotron", "rope")]
    assert rope["category"] == "liger-conservative" and "_resolve_rotary_dim" in rope["explanation"]
    assert misses[("nemotron", "norm_type")]["category"] == "liger-lacks-kernel"
    assert not [key for key, row in misses.items() if row["category"] == "ours-wrong"]
    assert ("olmo2", "rms_in_place") not in misses
    assert "| **all** |" in loo.table(result)


def test_notes_section_is_replaced_and_the_others_kept(tmp_path):
    notes = tmp_path / "NOTES.md"
    notes.write_text("# Notes\n\n## kernel\nkeep me\n\n" + loo.NOTES_SECTION + "\nold\n\n## fuse\nkeep me too\n")
    loo.write_notes(notes, "| new table |")
    text = notes.read_text()
    assert "old" not in text and "| new table |" in text
    assert text.index("## kernel") < text.index(loo.NOTES_SECTION) < text.index("## fuse")
    assert text.count("keep me") == 2
    loo.write_notes(tmp_path / "fresh.md", "| t |")
    assert loo.NOTES_SECTION in (tmp_path / "fresh.md").read_text()
