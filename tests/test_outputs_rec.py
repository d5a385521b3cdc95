"""graphdist recommend / export of train-rec checkpoints (issue 45): the ratings file's ids as
written (string-like large ids, words), the LightGCN files' ids, recommend's top-K equal to a NumPy
brute force over the exported vectors (training items excluded, ties by the lowest item id),
the artifact at k = 2 equal to the SPEC in one process, --users and refusals in one line."""
from __future__ import annotations

import glob

import numpy as np
import pytest

from tests.cli_ranks import run_cli
from tests.conftest import once_per_run

pq = pytest.importorskip("pyarrow.parquet")

BIG = 18446744073709551616  # 2^64: no int64 holds it


def _ratings(path):
    """A rating log whose user ids are 20-digit numbers and plain ones, item ids zero-padded and
    words (Amazon's products: B00005N7P0)."""
    rng = np.random.default_rng(3)
    users = [str(BIG + 7 * u) if u % 3 else str(u) for u in range(40)]
    items = [f"{i:06d}" if i % 5 else f"B{i:08d}Z" for i in range(25)]
    lines = {(u, items[i]) for u in users for i in rng.choice(25, 6, replace=False)}
    path.write_text("".join(f"{u},{i},{1 + len(u) % 5}\n" for u, i in sorted(lines)))
    return users, items


def _ok(runs):
    for code, text in runs:
        assert code == 0, text
    return runs


def _setup(root):
    from graphdist.cli import main
    users, items = _ratings(root / "r.csv")
    spec = f"ratings:{root / 'r.csv'},test=0.25"
    art, ck = root / "art", str(root / "ck")
    assert main(["partition", spec, "--parts", "2", "--out", str(art)]) == 0
    common = ["--checkpoint-dir", ck]
    _ok(run_cli([["train-rec", "--partition", str(art), "--epochs", "2", "--dim", "8", "--batch-size", "64",
                  "--checkpoint-dir", ck, "--no-progress"],
                 ["recommend", "--partition", str(art), *common, "--top-k", "5", "--out", str(root / "k2")],
                 ["export", "--partition", str(art), *common, "--out", str(root / "vec")]], world_size=2))
    _ok(run_cli([["recommend", spec, *common, "--top-k", "5", "--out", str(root / "k1")]], world_size=1))
    return str(root), users, items


@pytest.fixture
def rec_run(tmp_path_factory):
    from pathlib import Path
    root, users, items = once_per_run(tmp_path_factory, "outputs-rec", _setup)
    return Path(root), users, items


def _recs(out):
    t = pq.read_table(sorted(glob.glob(f"{out}/*.parquet"))).to_pandas()
    return t.sort_values(["user_id", "rank"]).reset_index(drop=True)


def test_string_like_ids_survive_partition_train_and_recommend(rec_run):
    root, users, items = rec_run
    a, b = _recs(root / "k2"), _recs(root / "k1")
    assert set(a.user_id) == set(users) and set(a.item_id) <= set(items)  # exactly as written
    assert str(BIG + 7) in set(a.user_id) and {"000003", "B00000010Z"} <= set(items)
    assert a[["user_id", "rank", "item_id"]].equals(b[["user_id", "rank", "item_id"]])  # k = 2 artifact = SPEC
    assert np.abs(a.score.values - b.score.values).max() < 1e-5
    import duckdb
    types = duckdb.sql(f"SELECT typeof(user_id), typeof(item_id), typeof(score), max(rank), count(DISTINCT user_id) "
                       f"FROM '{root}/k2/*.parquet' GROUP BY ALL").fetchall()
    assert types == [("VARCHAR", "VARCHAR", "FLOAT", 5, 40)]


def _brute(root, users, items, k, extra=()):
    """``(user ids, item ids, scores)`` of a NumPy top-``k`` over the exported vectors: the
    training's pairs and ``extra`` (user id, item id) left out, ties by the lowest item id."""
    from graphdist.rec.data import load_ratings
    u = pq.read_table(root / "vec" / "users.parquet").to_pydict()
    it = pq.read_table(root / "vec" / "items.parquet").to_pydict()
    assert sorted(u["user_id"]) == sorted(users) and sorted(it["item_id"]) == sorted(items)
    uid, iid = np.array(sorted(u["user_id"])), np.array(sorted(it["item_id"]))  # the loader's order
    U = np.array(u["embedding"], dtype=np.float32)[np.argsort(u["user_id"])]
    V = np.array(it["embedding"], dtype=np.float32)[np.argsort(it["item_id"])]
    r = load_ratings(f"ratings:{root / 'r.csv'},test=0.25")
    assert r.user_ids.tolist() == uid.tolist() and r.item_ids.tolist() == iid.tolist()
    S = U @ V.T
    tr = r.train.numpy()
    S[tr[:, 0], tr[:, 1]] = -np.inf
    for a, b in extra:
        if a in uid and b in iid:
            S[np.searchsorted(uid, a), np.searchsorted(iid, b)] = -np.inf
    cols = np.broadcast_to(np.arange(S.shape[1]), S.shape)
    order = np.lexsort((cols, -S), axis=1)[:, :k]  # score descending, then the lowest item id
    top = np.take_along_axis(S, order, 1).reshape(-1)
    keep = np.isfinite(top)
    return np.repeat(uid, k)[keep], iid[order].reshape(-1)[keep], top[keep], {(uid[x], iid[y]) for x, y in tr}


def test_exclude_leaves_newer_interactions_out_as_the_brute_force_does(rec_run, tmp_path):
    """``--exclude``: each of 12 users' 1st and 3rd recommended items (as if bought since), a pair
    of a user the data has not and one of an item it has not; on 2 ranks, for those 12 users
    (``--users`` as a Parquet column), the lists are the brute force's with those pairs left out
    too, still 5 per user."""
    root, users, items = rec_run
    before = _recs(root / "k2")
    pairs = [(u, g.item_id.iloc[r]) for u, g in list(before.groupby("user_id"))[:12] for r in (0, 2)]
    ex = tmp_path / "since.csv"
    ex.write_text("".join(f"{a},{b}\n" for a, b in pairs + [("nobody", items[0]), (users[0], "no-such-item")]))
    import pyarrow as pa
    chosen = sorted({a for a, _ in pairs})
    pq.write_table(pa.table({"user": chosen}), tmp_path / "users.parquet")
    runs = run_cli([["recommend", "--partition", str(root / "art"), "--checkpoint-dir", str(root / "ck"), "--top-k",
                     "5", "--exclude", str(ex), "--users", str(tmp_path / "users.parquet"), "--out", str(tmp_path / "k2"),
                     "--report", str(tmp_path / "r.json")]], world_size=2)
    _ok(runs)
    got = _recs(tmp_path / "k2")
    want_u, want_i, want_s, _ = _brute(root, users, items, 5, pairs)
    mine = np.isin(want_u, chosen)
    want_u, want_i, want_s = want_u[mine], want_i[mine], want_s[mine]
    assert sorted(set(got.user_id)) == chosen
    assert got.user_id.tolist() == want_u.tolist() and got.item_id.tolist() == want_i.tolist()
    assert np.abs(got.score.values - want_s).max() < 1e-5
    assert not {(a, b) for a, b in zip(got.user_id, got.item_id)} & set(pairs)
    import json
    rep = json.loads((tmp_path / "r.json").read_text())
    assert (rep["exclude/pairs"], rep["exclude/unmatched_pairs"]) == (len(pairs) + 1, 1)


def test_top_k_equals_numpy_brute_force_on_exported_vectors(rec_run):
    root, users, items = rec_run
    want_u, want_i, want_s, train = _brute(root, users, items, 5)
    got = _recs(root / "k2")
    assert got.item_id.tolist() == want_i.tolist() and got.user_id.tolist() == want_u.tolist()
    assert np.abs(got.score.values - want_s).max() < 1e-5
    assert not {(a, b) for a, b in zip(got.user_id, got.item_id)} & train


def test_users_file_and_refusals(rec_run, tmp_path, capsys):
    from graphdist.cli import main
    root, users, items = rec_run
    ck = str(root / "ck")
    spec = f"ratings:{root / 'r.csv'},test=0.25"
    some = tmp_path / "some.txt"
    some.write_text(f"{users[1]}\n\n{users[3]}\n")
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{users[1]}\nnope1\n{BIG + 1}\n0001\n")
    runs = run_cli([["recommend", spec, "--checkpoint-dir", ck, "--top-k", "3", "--users", str(some),
                     "--out", str(tmp_path / "some")],
                    ["recommend", spec, "--checkpoint-dir", ck, "--top-k", "3", "--users", str(bad),
                     "--out", str(tmp_path / "bad")]], world_size=1)
    assert runs[0][0] == 0, runs[0][1]
    assert sorted(set(_recs(tmp_path / "some").user_id)) == sorted([users[1], users[3]])
    assert runs[1][0] == 2 and not (tmp_path / "bad").exists()
    lines = [ln for ln in runs[1][1].splitlines() if ln.strip()]
    assert lines == [f"graphdist: error: --users {bad}: 3 of its 4 ids are not users of the data: nope1, {BIG + 1}, "
                     "0001"]
    # a GCN checkpoint is not a recommender's, nor the reverse
    assert main(["infer", "sbm:nodes=50", "--checkpoint-dir", ck, "--out", str(tmp_path / "i")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"graphdist: error: --checkpoint-dir {ck}: a checkpoint of train-rec (LightGCN), but infer needs "
                   "one of train-gcn (GCN / GraphSAGE / PyG model)"]
    assert main(["export", "--checkpoint-dir", ck, "--out", str(tmp_path / "e")]) == 2
    assert "give its SPEC or --partition DIR" in capsys.readouterr().err
    # the same log split otherwise is another training graph: the line says which options choose it
    other = spec.replace("test=0.25", "test=0.5")
    assert main(["recommend", other, "--checkpoint-dir", ck, "--top-k", "3", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"but {other} has fingerprint " in err[0] and err[0].endswith(
        " (another graph); give the data the training had, its options included: a rating log's test=, split=, "
        "seed= and min_rating= choose the training interactions"), err
    assert not (tmp_path / "o").exists()


def test_lightgcn_files_ids(tmp_path):
    (tmp_path / "train.txt").write_text("0 0 1 2\n1 2 3\n2\n3 4 0 5\n4 1 3\n")  # user 2: no items
    (tmp_path / "test.txt").write_text("0 3\n1 0 1\n3 5\n")
    spec, ck = f"lightgcn:{tmp_path}", str(tmp_path / "ck")
    _ok(run_cli([["train-rec", spec, "--epochs", "2", "--dim", "4", "--checkpoint-dir", ck, "--no-progress"],
                 ["recommend", spec, "--checkpoint-dir", ck, "--top-k", "10", "--out", str(tmp_path / "out")]],
                world_size=2))
    got = _recs(tmp_path / "out")
    assert sorted(set(got.user_id)) == [0, 1, 2, 3, 4]  # the files' ids, as given
    per = got.groupby("user_id").size().to_dict()
    assert per == {0: 3, 1: 4, 2: 6, 3: 3, 4: 4}  # all 6 items less each user's training items
    assert not set(got[got.user_id == 0].item_id) & {0, 1, 2}


def test_the_summary_says_when_users_have_fewer_than_k_items_left():
    """Top 10 of 4 items for users who have seen 2: 2 rows each, and the line says why not 10."""
    from graphdist.rec.recommend import summary_line
    rep = {"top_k": 10, "users": 5, "out": "t10", "rows": 10, "time/rank_s": 0.01, "mem/peak_bytes": 2**28,
           "world_size": 1}
    assert summary_line(rep).startswith(
        "recommend: top 10 for 5 users -> t10 (10 rows, fewer than 10 for users with fewer unseen items); ")
    assert summary_line({**rep, "rows": 50}).startswith("recommend: top 10 for 5 users -> t10 (50 rows); ")
