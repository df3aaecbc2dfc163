"""Cost-based weights of fused dispatches (weight rule "cost"), on real IREE compiles.

The acceptance figures of the cost model: in a conv → BatchNorm → ReLU dispatch the
conv gets >= 90%; an add fused into a 128³ matmul gets <= 5%; ops in no
section keep their share as "(unmarked)"; index arithmetic that CSE merged
across blocks (a causal mask) does not pull another block into a dispatch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import sectionmark as sm
import sectionmark.compiler as smc
from sectionmark.compiler.weights import FLOPS_PER_BYTE
from sectionmark.section_map import SectionMap
from invariants import assert_profile_invariants
from nanogpt_builders import jax_gpt


def _site_with(section_map: SectionMap, path: tuple[str, ...]):
    """The one multi-section site that has a share of ``path``."""
    sites = [site for site in section_map.sites if len(site.shares) > 1 and path in {s.path for s in site.shares}]
    assert len(sites) == 1, [(site.key, site.shares) for site in section_map.sites]
    return sites[0]


def _weights(site) -> dict:
    return {share.path: share.weight for share in site.shares}


# Conv -> BatchNorm (inference: scale and shift per channel) -> ReLU, each its own section.
CONV_BN_RELU = """
func.func @main(%x: tensor<1x16x34x34xf32>, %w: tensor<16x16x3x3xf32>, %scale: tensor<16xf32>, %shift: tensor<16xf32>)
    -> tensor<1x16x32x32xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x16x32x32xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<1x16x32x32xf32>) -> tensor<1x16x32x32xf32>
  %conv = linalg.conv_2d_nchw_fchw ins(%x, %w : tensor<1x16x34x34xf32>, tensor<16x16x3x3xf32>)
      outs(%z : tensor<1x16x32x32xf32>) -> tensor<1x16x32x32xf32> loc("sectionmark:Block/Conv"("cnn.py":1:0))
  %bn = linalg.generic {indexing_maps = [affine_map<(n,c,h,w)->(n,c,h,w)>, affine_map<(n,c,h,w)->(c)>,
                                         affine_map<(n,c,h,w)->(c)>, affine_map<(n,c,h,w)->(n,c,h,w)>],
                        iterator_types = ["parallel","parallel","parallel","parallel"]}
      ins(%conv, %scale, %shift : tensor<1x16x32x32xf32>, tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<1x16x32x32xf32>) {
  ^bb0(%v: f32, %s: f32, %t: f32, %o: f32):
    %m = arith.mulf %v, %s : f32 loc("sectionmark:Block/BatchNorm"("cnn.py":2:0))
    %a = arith.addf %m, %t : f32 loc("sectionmark:Block/BatchNorm"("cnn.py":2:0))
    linalg.yield %a : f32
  } -> tensor<1x16x32x32xf32> loc("sectionmark:Block/BatchNorm"("cnn.py":2:0))
  %relu = linalg.generic {indexing_maps = [affine_map<(n,c,h,w)->(n,c,h,w)>, affine_map<(n,c,h,w)->(n,c,h,w)>],
                          iterator_types = ["parallel","parallel","parallel","parallel"]}
      ins(%bn : tensor<1x16x32x32xf32>) outs(%e : tensor<1x16x32x32xf32>) {
  ^bb0(%v: f32, %o: f32):
    %r = arith.maximumf %v, %c0 : f32 loc("sectionmark:Block/ReLU"("cnn.py":3:0))
    linalg.yield %r : f32
  } -> tensor<1x16x32x32xf32> loc("sectionmark:Block/ReLU"("cnn.py":3:0))
  return %relu : tensor<1x16x32x32xf32>
}
"""

# A 128³ matmul, a bias add in its own section, and a scale in no section.
MATMUL_ADD = """
func.func @main(%a: tensor<128x128xf32>, %b: tensor<128x128xf32>, %bias: tensor<128xf32>) -> tensor<128x128xf32> {
  %c0 = arith.constant 0.0 : f32
  %two = arith.constant 2.0 : f32
  %e = tensor.empty() : tensor<128x128xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<128x128xf32>) -> tensor<128x128xf32>
  %mm = linalg.matmul ins(%a, %b : tensor<128x128xf32>, tensor<128x128xf32>) outs(%z : tensor<128x128xf32>)
      -> tensor<128x128xf32> loc("sectionmark:MatMul"("mm.py":1:0))
  %add = linalg.generic {indexing_maps = [affine_map<(i,j)->(i,j)>, affine_map<(i,j)->(j)>, affine_map<(i,j)->(i,j)>],
                         iterator_types = ["parallel","parallel"]}
      ins(%mm, %bias : tensor<128x128xf32>, tensor<128xf32>) outs(%e : tensor<128x128xf32>) {
  ^bb0(%v: f32, %c: f32, %o: f32):
    %s = arith.addf %v, %c : f32 loc("sectionmark:Add"("mm.py":2:0))
    linalg.yield %s : f32
  } -> tensor<128x128xf32> loc("sectionmark:Add"("mm.py":2:0))
  %scaled = linalg.generic {indexing_maps = [affine_map<(i,j)->(i,j)>, affine_map<(i,j)->(i,j)>],
                            iterator_types = ["parallel","parallel"]}
      ins(%add : tensor<128x128xf32>) outs(%e : tensor<128x128xf32>) {
  ^bb0(%v: f32, %o: f32):
    %s = arith.mulf %v, %two : f32 loc("mm.py":3:0)
    linalg.yield %s : f32
  } -> tensor<128x128xf32> loc("mm.py":3:0)
  return %scaled : tensor<128x128xf32>
}
"""


@pytest.fixture(scope="module")
def conv_bn_relu():
    return smc.compile(CONV_BN_RELU)


@pytest.fixture(scope="module")
def matmul_add():
    return smc.compile(MATMUL_ADD)


def test_conv_gets_its_cost_share_of_a_fused_conv_bn_relu(conv_bn_relu):
    site = _site_with(conv_bn_relu.section_map, ("Block", "Conv"))
    assert site.rule == "cost" and "conv" in site.key
    weights = _weights(site)
    assert set(weights) == {("Block", "Conv"), ("Block", "BatchNorm"), ("Block", "ReLU")}
    assert weights[("Block", "Conv")] >= 0.90
    assert weights[("Block", "BatchNorm")] > weights[("Block", "ReLU")] > 0  # two ops per element vs one
    conv = next(share for share in site.shares if share.path == ("Block", "Conv"))
    assert conv.flops == 2 * 16 * 32 * 32 * 16 * 3 * 3  # 2·N·F·OH·OW·C·KH·KW
    assert conv.bytes == (16 * 34 * 34 + 16 * 16 * 3 * 3) * 4  # input and filter, read from memory
    # The worked example of docs/section-map.md and docs/concepts.md.
    assert weights[("Block", "Conv")] == pytest.approx(5_051_392 / 5_101_056)
    # scale is read by BatchNorm's multiply and add and by the ReLU computed from them; shift by the add and the ReLU
    assert weights[("Block", "BatchNorm")] == pytest.approx((32_768 + 4 * (64 * 2 / 3 + 64 / 2)) / 5_101_056)
    assert weights[("Block", "ReLU")] == pytest.approx((16_384 + 4 * (64 / 3 + 64 / 2)) / 5_101_056)


def test_add_fused_into_a_matmul_gets_at_most_five_percent(matmul_add):
    site = _site_with(matmul_add.section_map, ("Add",))
    weights = _weights(site)
    assert weights[("Add",)] <= 0.05
    matmul = next(share for share in site.shares if share.path == ("MatMul",))
    assert matmul.flops == 2 * 128**3
    total = sum(share.flops + FLOPS_PER_BYTE * share.bytes for share in site.shares)
    for share in site.shares:  # the weights are the recorded costs, normalised
        assert share.weight == pytest.approx((share.flops + FLOPS_PER_BYTE * share.bytes) / total)


def test_ops_in_no_section_keep_their_share_as_unmarked(matmul_add):
    site = _site_with(matmul_add.section_map, ("Add",))
    weights = _weights(site)
    assert weights[()] > 0  # the scale in no section
    assert sum(weights.values()) == pytest.approx(1.0)
    assert () not in matmul_add.section_map.sections  # "(unmarked)" is not a declared section


def test_unmarked_time_is_reported_when_unmarked_ops_fuse_into_sections(matmul_add, tmp_path):
    rng = np.random.default_rng(0)
    args = [rng.random((128, 128), np.float32), rng.random((128, 128), np.float32), rng.random(128, np.float32)]
    prof = sm.profile(matmul_add, args=args, iterations=3, warmup=1, quiet=True)
    assert_profile_invariants(prof)
    assert prof.unmarked_ns > 0
    assert prof.to_json()["weight_rule"] == "cost"


def test_map_records_rule_and_costs_and_round_trips(conv_bn_relu, tmp_path):
    section_map = conv_bn_relu.section_map
    assert section_map.version == 2 and section_map.weight_rule == "cost"
    path = tmp_path / "m.sections.json"
    section_map.save(path)
    assert SectionMap.load(path) == section_map


def test_dynamic_shapes_fall_back_to_op_count():
    source = """
    func.func @main(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>) -> tensor<?x16xf32> {
      %0 = arith.addf %a, %b : tensor<?x16xf32> loc("sectionmark:Add"("d.py":1:0))
      %1 = math.exp %0 : tensor<?x16xf32> loc("sectionmark:Exp"("d.py":2:0))
      return %1 : tensor<?x16xf32>
    }
    """
    site = smc.compile(source).section_map.sites[0]
    assert site.rule == "op-count"
    assert _weights(site) == {("Add",): 0.5, ("Exp",): 0.5}


def test_jax_nanogpt_has_no_site_weighed_across_blocks():
    pytest.importorskip("jax")
    forward, tokens = jax_gpt()
    compiled = sm.compile(sm.jax.export(forward, tokens))
    for site in compiled.section_map.sites:
        by_block: dict = {}
        for share in site.shares:
            by_block[share.path[:1]] = by_block.get(share.path[:1], 0.0) + share.weight
        assert max(by_block.values(), default=1.0) >= 0.98, (site.key, site.shares)


class _UnmarkedBetweenSections(torch.nn.Module):
    """Issue L's repro: four unmarked elementwise ops that IREE fuses with A's sin and B's cos."""

    def forward(self, x):
        with sm.section("A"):
            a = torch.sin(x)
        b = (1 - a) * x * x * x
        with sm.section("B"):
            return torch.cos(b)


def _single_site_weights(compiled) -> dict:
    (site,) = compiled.section_map.sites
    assert site.rule == "cost"
    return _weights(site)


def test_unmarked_ops_fused_between_torch_sections_stay_unmarked():
    x = torch.rand(2048)
    compiled = sm.compile(sm.torch.export(_UnmarkedBetweenSections(), args=(x,)))
    weights = _single_site_weights(compiled)
    # six elementwise ops of 2048 elements, all computed from x: four are in no section
    assert weights[()] == pytest.approx(4 / 6, abs=0.05)
    assert weights[("A",)] == pytest.approx(weights[("B",)])
    prof = sm.profile(compiled, args=(x.numpy(),), iterations=3, warmup=1, quiet=True)
    assert_profile_invariants(prof)
    assert prof.unmarked_ns / prof.total_ns == pytest.approx(weights[()])


def test_unmarked_ops_fused_between_jax_sections_stay_unmarked():
    jnp = pytest.importorskip("jax.numpy")

    def forward(x):
        with sm.section("A"):
            a = jnp.exp(x)
        b = a * a - a + 3.0
        with sm.section("B"):
            return jnp.tanh(b)

    weights = _single_site_weights(sm.compile(sm.jax.export(forward, np.zeros(2048, np.float32))))
    assert weights[()] == pytest.approx(3 / 5, abs=0.05)  # mul, sub, add of five ops


def test_an_op_without_a_location_of_its_own_takes_its_enclosing_ops_section():
    from sectionmark.locations import has_no_own_location

    assert has_no_own_location("loc(unknown)")
    assert has_no_own_location('loc(callsite(unknown at "source.mlir":2:1))')
    assert not has_no_own_location('loc("mm.py":3:0)')
    assert not has_no_own_location('loc(callsite("sectionmark:A"("a.py":1:0) at "source.mlir":2:1))')
    assert not has_no_own_location('loc("jit(f)/mul"("f.py":1:2))')


def test_the_table_and_json_say_which_rule_split_each_site():
    """A static site (cost) and a dynamic one (op count) in one program: the footer and JSON count both."""
    source = """
    func.func @main(%a: tensor<?x16xf32>, %b: tensor<?x16xf32>, %s: tensor<64x16xf32>) -> (tensor<?x16xf32>, tensor<64x16xf32>) {
      %0 = arith.addf %a, %b : tensor<?x16xf32> loc("sectionmark:Add"("d.py":1:0))
      %1 = math.exp %0 : tensor<?x16xf32> loc("sectionmark:Exp"("d.py":2:0))
      %2 = math.sin %s : tensor<64x16xf32> loc("sectionmark:Add"("d.py":3:0))
      %3 = math.cos %2 : tensor<64x16xf32> loc("sectionmark:Exp"("d.py":4:0))
      return %1, %3 : tensor<?x16xf32>, tensor<64x16xf32>
    }
    """
    compiled = smc.compile(source)
    assert sorted(site.rule for site in compiled.section_map.sites) == ["cost", "op-count"]
    rng = np.random.default_rng(0)
    args = [rng.random((8, 16), np.float32), rng.random((8, 16), np.float32), rng.random((64, 16), np.float32)]
    prof = sm.profile(compiled, args=args, iterations=2, warmup=1, quiet=True)
    assert_profile_invariants(prof)
    data = prof.to_json()
    assert data["weight_rule"] == "mixed" and data["split_rules"] == {"cost": 1, "op-count": 1}
    assert sorted(site["rule"] for site in data["sites"]) == ["cost", "op-count"]
    assert "by estimated cost (FLOPs and bytes) at 1 site, by op count (shapes not static) at 1 site" in " ".join(prof.table().split())
    assert type(prof.session).from_json(data).split_rules == {"cost": 1, "op-count": 1}


def test_the_op_count_fallback_keeps_unmarked_ops_unmarked():
    """Dynamic shapes: ops are counted, and an unmarked one fused between two sections counts as unmarked."""
    source = """
    func.func @main(%a: tensor<?x16xf32>) -> tensor<?x16xf32> {
      %0 = math.exp %a : tensor<?x16xf32> loc("sectionmark:A"("d.py":1:0))
      %1 = arith.mulf %0, %0 : tensor<?x16xf32> loc("d.py":2:0)
      %2 = arith.subf %1, %0 : tensor<?x16xf32> loc("d.py":3:0)
      %3 = math.tanh %2 : tensor<?x16xf32> loc("sectionmark:B"("d.py":4:0))
      return %3 : tensor<?x16xf32>
    }
    """
    (site,) = smc.compile(source).section_map.sites
    assert site.rule == "op-count"
    assert _weights(site) == {("A",): 0.25, (): 0.5, ("B",): 0.25}


class _MaskOutsideAttention(torch.nn.Module):
    """A causal mask built in no section from iotas, used by SDPA in "Attention"."""

    def forward(self, q, k, v):
        n = q.shape[-2]
        mask = torch.arange(n)[:, None] >= torch.arange(n)[None, :]
        with sm.section("Attention"):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(1, 2, n, n))


def test_a_dispatch_of_addressing_alone_belongs_to_its_root_op():
    """Index compares cost nothing (CSE takes them across blocks): such a site is not split by op count."""
    q = torch.rand(1, 2, 8, 16)
    compiled = sm.compile(sm.torch.export(_MaskOutsideAttention(), args=(q, q, q)))
    assert "op-count" not in {site.rule for site in compiled.section_map.sites}
    mask_sites = [site for site in compiled.section_map.sites if site.rule == "root"]
    assert mask_sites and all(_weights(site) == {("Attention",): 1.0} for site in mask_sites)
