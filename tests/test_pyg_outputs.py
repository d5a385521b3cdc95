"""``gd.write_predictions``: a PyG script's output on k ranks as the Parquet folder ``infer`` writes,
keyed by the input's own ids (word ids of an edge list here), its ``pred`` the class names the
labels were written as, from a spec and from an artifact; checked row by row against the
features table the rows were made from."""
from __future__ import annotations

import numpy as np
import pytest

from graphdist.testing import run_ranks

pd = pytest.importorskip("pandas")

KINDS = ["insect", "mammal", "bird"]
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kiwi", "lark"]


def _files(d):
    rng = np.random.default_rng(3)
    edges = [(WORDS[i], WORDS[(i + 1) % 12]) for i in range(12)] + [(WORDS[i], WORDS[(i + 5) % 12]) for i in range(12)]
    (d / "g.txt").write_text("".join(f"{a} {b}\n" for a, b in edges))
    feats = {w: rng.standard_normal(3).round(3).tolist() for w in WORDS}
    (d / "x.csv").write_text("node,a,b,c\n" + "".join(f"{w},{','.join(map(str, v))}\n" for w, v in reversed(feats.items())))
    (d / "y.csv").write_text("".join(f"{w},{KINDS[i % 3]}\n" for i, w in enumerate(WORDS)))  # labels as names
    return f"edgelist:{d / 'g.txt'},features={d / 'x.csv'},labels={d / 'y.csv'},train=0.5,val=0.25", feats


def _job(rank, ws, source, out):
    import graphdist.gnn.pyg as gd
    part = gd.load_part(source)
    man = gd.write_predictions(part, part.x, out, embedding=part.x[:, :2] * 2)
    bad = None
    try:
        gd.write_predictions(part, part.x, out)
    except Exception as e:  # noqa: BLE001 - the refusal's text is the result
        bad = str(e)
    return man["rows"], bad, man["input"], man["world_size"], man["class_names"], part.class_names


@pytest.mark.parametrize("from_artifact", [False, True])
def test_predictions_are_keyed_by_the_inputs_ids(tmp_path, from_artifact):
    spec, feats = _files(tmp_path)
    source = spec
    if from_artifact:
        from graphdist.partition.tools import PartitionConfig, partition_to_artifact
        source = str(tmp_path / "parts")
        partition_to_artifact(PartitionConfig(spec=spec, parts=2, method="metis", out=source))
    out = tmp_path / "pred"
    res = run_ranks(_job, 2, args=(source, str(out)), timeout=240)
    assert [r[0] for r in res] == [12, 12] and res[0][2:] == (source, 2, sorted(KINDS), sorted(KINDS))
    assert res[0][1] == (f"gd.write_predictions: out {out}: exists and is not empty; add overwrite=True to replace "
                         "it, or choose another")
    df = pd.read_parquet(out)
    assert sorted(df.node_id) == WORDS and len(list(out.glob("part-*.parquet"))) == 2
    for row in df.itertuples():
        want = np.array(feats[row.node_id], dtype=np.float32)
        np.testing.assert_array_equal(np.asarray(row.logits), want)
        np.testing.assert_array_equal(np.asarray(row.embedding), want[:2] * 2)
        assert row.pred == sorted(KINDS)[int(np.argmax(want))]  # the class's name


def _wrong_rows(rank, ws, spec):
    import graphdist.gnn.pyg as gd
    part = gd.load_part(spec)
    try:
        gd.write_predictions(part, part.gather(part.x), "never")
    except Exception as e:  # noqa: BLE001
        return str(e), part.num_owned
    return None, part.num_owned


def test_the_whole_graphs_rows_are_refused_in_one_line(tmp_path):
    spec, _ = _files(tmp_path)
    for msg, n in run_ranks(_wrong_rows, 2, args=(spec,), timeout=240):
        assert msg is not None and msg.startswith(f"gd.write_predictions: logits must be one row per owned node, [{n}, D]")
        assert msg.endswith("got (12, 3) (pass the model's output on part.x, not part.gather(...))"), msg
