"""One seed-offset table (:mod:`zoo.seeds`): no offset used twice, none written by hand."""

from __future__ import annotations

import ast
from pathlib import Path

from zoo.seeds import GroundTruthStream, Stream, seed_for

ROOT = Path(__file__).resolve().parent.parent


def _seedish(node: ast.AST) -> bool:
    """A name or attribute mentioning ``seed`` (``seed``, ``ctx.seed``), or a sum with one."""
    if isinstance(node, ast.BinOp):
        return _seedish(node.left) or _seedish(node.right)
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return "seed" in name.lower()


def _hand_offsets() -> list[str]:
    out = []
    # reports/ never imports zoo: its functions take the seed they are given
    for pkg in ("zoo",):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
                    continue
                sides = (node.left, node.right)
                if any(_seedish(s) for s in sides) and any(
                    isinstance(s, ast.Constant) and isinstance(s.value, int) for s in sides
                ):
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_no_offset_used_twice():
    values = [int(s) for s in Stream]
    assert len(values) == len(set(values)), "two purposes share a seed offset"
    assert len({int(s) for s in GroundTruthStream}) == len(GroundTruthStream)


def test_strided_families_do_not_reach_other_offsets():
    singles = sorted(int(s) for s in Stream if not s.name.startswith("KTIED_"))
    assert max(singles) < Stream.KTIED_EVAL < Stream.KTIED_SHUFFLE < Stream.KTIED_ELBO_STEP
    assert Stream.KTIED_SHUFFLE + 100 <= Stream.KTIED_ELBO_STEP
    # VSBC's replications take VSBC + r, r < 400: no single stream in that range
    taken = range(Stream.VSBC, Stream.VSBC + 400)
    assert not [s for s in Stream if s != Stream.VSBC and int(s) in taken]


def test_no_literal_seed_offsets_in_code():
    found = _hand_offsets()
    assert not found, "seed + <literal> written by hand (use zoo.seeds.Stream): " + ", ".join(found)


def test_seed_for_adds_offset_and_index():
    assert seed_for(10, Stream.PREDICTIVE) == 11
    assert seed_for(10, Stream.KTIED_SHUFFLE, 2) == 712
