"""Interaction data for train-rec: rating logs in the MovieLens / lastfm formats, the LightGCN
train/test layout, rec-synth, splits, the user-item graph, and one-line file:line errors."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphdist.cli import main
from graphdist.errors import DataFormatError, MissingFileError, SpecError
from graphdist.rec.data import load_ratings

# ml-100k u.data: user \t item \t rating \t timestamp, no header, 1-based ids, random order
UDATA = """196\t242\t3\t881250949
186\t302\t3\t891717742
22\t377\t1\t878887116
244\t51\t2\t880606923
166\t346\t1\t886397596
298\t474\t4\t884182806
115\t265\t2\t881171488
253\t465\t5\t891628467
305\t451\t3\t886324817
6\t86\t3\t883603013
62\t257\t2\t879372434
286\t1014\t5\t879781125
200\t222\t5\t876042340
210\t40\t3\t891035994
224\t29\t3\t888104457
303\t785\t3\t879485318
122\t387\t5\t879270459
194\t274\t2\t879539794
291\t1042\t4\t874834944
234\t1184\t2\t892079237
196\t474\t5\t881250950
196\t86\t4\t881250951
298\t86\t5\t884182807
"""


def test_udata_min_rating(tmp_path):
    f = tmp_path / "u.data"
    f.write_text(UDATA)
    r = load_ratings(f"ratings:{f},min_rating=4")
    # kept (rating >= 4): (298,474) (253,465) (286,1014) (200,222) (122,387) (291,1042) (196,474) (196,86) (298,86)
    users = sorted({196, 298, 253, 286, 200, 122, 291})
    items = sorted({474, 465, 1014, 222, 387, 1042, 86})
    assert (r.num_users, r.num_items) == (len(users), len(items))
    assert r.train.shape[0] + r.test.shape[0] == 9 and r.meta["lines_kept"] == 9
    pairs = {(users[u], items[i]) for u, i in torch.cat([r.train, r.test]).tolist()}  # ids ascending
    assert (196, 86) in pairs and (298, 474) in pairs and (166, 346) not in pairs
    g = r.graph  # users then items, both directions of every training pair
    assert g.num_nodes == r.num_users + r.num_items and g.num_edges == 2 * r.train.shape[0]
    src, dst = g.edge_index
    assert bool(((src < r.num_users) != (dst < r.num_users)).all())
    all_rows = load_ratings(f"ratings:{f}")
    assert all_rows.train.shape[0] + all_rows.test.shape[0] == 23


def test_random_split_is_per_user_and_seeded(tmp_path):
    f = tmp_path / "log.csv"
    rows = [f"{u},{i}" for u in range(6) for i in range(u * 3, u * 3 + 10)]
    f.write_text("\n".join(rows) + "\n")
    r = load_ratings(f"ratings:{f},test=0.3,seed=1")
    assert torch.bincount(r.test[:, 0], minlength=6).tolist() == [3] * 6  # round(0.3 * 10) per user
    assert torch.bincount(r.train[:, 0], minlength=6).tolist() == [7] * 6
    again = load_ratings(f"ratings:{f},test=0.3,seed=1")
    other = load_ratings(f"ratings:{f},test=0.3,seed=2")
    assert torch.equal(again.test, r.test) and not torch.equal(other.test, r.test)
    assert r.graph.fingerprint != other.graph.fingerprint


def test_temporal_split_holds_out_latest(tmp_path):
    f = tmp_path / "ratings.dat"  # ml-1m: UserID::MovieID::Rating::Timestamp
    f.write_text("".join(f"{u}::{i}::5::{1000 + 10 * i - u}\n" for u in (1, 2) for i in range(1, 11)))
    r = load_ratings(f"ratings:{f},split=temporal,test=0.2")
    # per user the two latest timestamps are items 10 and 9 (ids 9, 8 after remapping)
    assert r.test.tolist() == [[0, 8], [0, 9], [1, 8], [1, 9]]
    with pytest.raises(DataFormatError, match=r"split=temporal needs a timestamp column"):
        g = tmp_path / "three.txt"
        g.write_text("1 2 3\n2 3 4\n")
        load_ratings(f"ratings:{g},split=temporal")


def test_csv_with_header_and_half_stars(tmp_path):
    f = tmp_path / "ratings.csv"  # ml-latest(-small): header, comma, half stars
    f.write_text("userId,movieId,rating,timestamp\r\n1,1,4.0,964982703\r\n1,3,4.5,964981247\r\n"
                 "1,6,3.0,964982224\r\n2,3,3.5,964983815\r\n2,190000,5.0,964982931\r\n")
    r = load_ratings(f"ratings:{f},min_rating=3.5")
    assert (r.num_users, r.num_items) == (2, 3) and r.train.shape[0] + r.test.shape[0] == 4
    assert r.meta["item_ids"] == [1, 190000]


def test_split_file_lastfm_layout(tmp_path):
    """The LightGCN repo's lastfm files: user<TAB>item<TAB>count, CRLF, 1-based, some counts
    written as floats; test ids missing from train still become nodes."""
    (tmp_path / "data1.txt").write_bytes(b"1\t10\t993\r\n1\t11\t3.2466e+05\r\n2\t10\t5\r\n3\t12\t7\r\n")
    (tmp_path / "test1.txt").write_bytes(b"1\t12\t4\r\n2\t11\t2\r\n4\t13\t1\r\n3\t12\t9\r\n")
    r = load_ratings(f"ratings:{tmp_path / 'data1.txt'},split=test1.txt")  # found beside the train file
    assert (r.num_users, r.num_items) == (4, 4)
    assert r.train.tolist() == [[0, 0], [0, 1], [1, 0], [2, 2]]
    assert r.test.tolist() == [[0, 2], [1, 1], [3, 3]]  # (3, 12) is a training pair: dropped
    assert r.meta["test_pairs_in_train_dropped"] == 1
    s = r.summary()
    assert s["interactions"] == 7 and s["test_users"] == 3 and s["density"] == pytest.approx(7 / 16)
    with pytest.raises(MissingFileError, match="split file 'nope.txt' not found"):
        load_ratings(f"ratings:{tmp_path / 'data1.txt'},split=nope.txt")


@pytest.mark.parametrize("text,spec_tail,message", [
    ("1\t2\t3\t4\n1\t2.5\t3\t4\n", "", r"x.txt:2: item id 2.5 is not an integer id"),
    ("1\t2\t3\t4\n\n1\t2\tq\t4\n", "", r"x.txt:3: 'q' is not a number"),
    (b"u1\ti1\nu\xff\ti2\n", "", r"x.txt:2: user id b'u\\xff' is not UTF-8 text"),
    ("1,2,3,4\n2,3,4,5\n3,4,5\n", "", r"x.txt:3: expected at least 4 fields, got 3"),
    ("7\n", "", r"x.txt:1: expected at least 2 fields \(user, item\), got 1"),
    ("1 2\n3 4\n", ",min_rating=4", r"x.txt:1: min_rating=4 needs a rating column"),
    ("1 2 1\n3 4 2\n", ",min_rating=4", r"x.txt: no interactions with rating >= 4"),
    ("# only a comment\n", "", r"x.txt: no interactions found"),
])
def test_bad_lines_name_file_and_line(tmp_path, text, spec_tail, message):
    f = tmp_path / "x.txt"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(DataFormatError, match=message):
        load_ratings(f"ratings:{f}{spec_tail}")


def test_word_ids_are_kept_as_written(tmp_path, capsys):
    """Amazon's users and products (A2SUAM1J3GNN3B, B00005N7P0) and Yelp's ids are words: each
    column whose ids are not all numbers is kept as the strings written, in ascending UTF-8 order;
    a numeric column beside it stays int64. A 2-field log's first line whose user and item appear
    nowhere else is named (it may be a header, which cannot be told from data there)."""
    f = tmp_path / "reviews.csv"
    f.write_text("reviewerID,asin,overall\nA2SUAM1J3GNN3B,0000013714,5.0\nA1EV,B00005N7P0,4.0\n"
                 "A2SUAM1J3GNN3B,B00005N7P0,3.0\nAZ-9_x,0000013714,1.0\n")
    r = load_ratings(f"ratings:{f},test=0.01")
    assert r.user_ids.tolist() == ["A1EV", "A2SUAM1J3GNN3B", "AZ-9_x"]
    assert r.item_ids.tolist() == ["0000013714", "B00005N7P0"]
    pairs = sorted((r.user_ids[u], r.item_ids[i]) for u, i in np.concatenate([r.train.numpy(), r.test.numpy()]))
    assert pairs == [("A1EV", "B00005N7P0"), ("A2SUAM1J3GNN3B", "0000013714"), ("A2SUAM1J3GNN3B", "B00005N7P0"),
                     ("AZ-9_x", "0000013714")]
    g = tmp_path / "mixed.txt"
    g.write_text("alice 10\nbob 7\n")
    r = load_ratings(f"ratings:{g},test=0.01")
    assert r.user_ids.tolist() == ["alice", "bob"] and r.item_ids.tolist() == [7, 10]
    assert "is read as an interaction" not in capsys.readouterr().err  # 3 fields: the header was told
    h = tmp_path / "pairs.csv"
    h.write_text("user,item\nA1,B1\nA1,B2\nA2,B1\n")
    assert load_ratings(f"ratings:{h},test=0.01").user_ids.tolist() == ["A1", "A2", "user"]
    assert ("pairs.csv: the first line (user 'user', item 'item') is read as an interaction whose user and "
            "item appear nowhere else: if it names the columns, comment it with #") in capsys.readouterr().err


def test_a_log_too_small_for_a_test_split_says_so_instead_of_printing_nan(tmp_path, capsys):
    """Two interactions per user: the default test share (0.2) rounds to none for every user, so
    the ranking cannot be measured; train-rec says why and how to get a test split, and its summary
    says the metrics were not measured (the report keeps nan). With test=0.5 each user has one."""
    f = tmp_path / "r.tsv"
    f.write_text("".join(f"u{u}\ti{(u + j) % 4}\t5\n" for u in range(5) for j in range(2)))
    assert main(["train-rec", f"ratings:{f}", "--epochs", "2", "--no-progress", "--report",
                 str(tmp_path / "r.json")]) == 0
    out, err = capsys.readouterr()
    assert ("warning: the data has no test interactions, so recall@20 and ndcg@20 are not measured (nan in the "
            "report): a user's test share is round(test x its interactions), none below 3 at the default "
            "test=0.2; give the spec a larger test= (or split=FILE naming test interactions)") in err, err
    assert out.startswith("recall@20 and ndcg@20 not measured (no test interactions), final loss "), out
    import json
    import math
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["data"]["test"] == 0 and rep["eval_users"] == 0 and math.isnan(rep["recall@20"])
    assert main(["train-rec", f"ratings:{f},test=0.5", "--epochs", "2", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "no test interactions" not in err + out and out.startswith("recall@20 "), out


def test_cli_errors_are_one_line(tmp_path, capsys):
    f = tmp_path / "bad.txt"
    f.write_text("1 2 3\n1 2 x\n")
    assert main(["data", "info", f"ratings:{f}"]) == 2
    assert main(["data", "info", f"ratings:{f},test=1.5"]) == 2
    assert main(["train-rec", "sbm:nodes=100", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("graphdist: error:") for e in err)
    assert "bad.txt:2: 'x' is not a number" in err[0]
    assert "test=1.5 must lie strictly between 0 and 1" in err[1]
    assert "graph data, but this command needs ratings data" in err[2]
    with pytest.raises(SpecError, match="ratings data, but this command needs graph data"):
        from graphdist.data import load_graph
        load_graph(f"ratings:{f}")


def test_lightgcn_layout(tmp_path):
    (tmp_path / "train.txt").write_text("0 0 1 2\n1 2\n2\n3 4 0\n")  # user 2 has no items
    (tmp_path / "test.txt").write_text("0 3\n1 0 1\n3 5\n")
    r = load_ratings(f"lightgcn:{tmp_path}")
    assert (r.num_users, r.num_items) == (4, 6)  # max id + 1 over both files, ids as given
    assert r.train.tolist() == [[0, 0], [0, 1], [0, 2], [1, 2], [3, 0], [3, 4]]
    assert r.test.tolist() == [[0, 3], [1, 0], [1, 1], [3, 5]]
    (tmp_path / "test.txt").write_text("0 3\n1 0 x1\n")
    with pytest.raises(DataFormatError, match=r"test.txt:2: 'x1' is not an integer id"):
        load_ratings(f"lightgcn:{tmp_path}")
    (tmp_path / "test.txt").unlink()
    with pytest.raises(MissingFileError, match="lacks test.txt"):
        load_ratings(f"lightgcn:{tmp_path}")


def test_rec_synth_is_seeded_and_planted():
    a = load_ratings("rec-synth:users=300,items=200,avg_items=10,seed=4")
    b = load_ratings("rec-synth:users=300,items=200,avg_items=10,seed=4")
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)
    n = a.train.shape[0] + a.test.shape[0]
    assert 0.8 * 3000 < n < 1.2 * 3000 and a.test.shape[0] == pytest.approx(0.2 * n, rel=0.1)
    counts = torch.bincount(a.train[:, 1], minlength=200).sort(descending=True).values
    assert counts[:10].double().mean() > 5 * counts[-100:].double().mean()  # popularity skew
    with pytest.raises(SpecError, match="avg_items=150.0 must lie in"):
        load_ratings("rec-synth:items=200,avg_items=150")


def test_a_large_rec_synth_shows_progress_on_a_terminal(monkeypatch, capsys):
    """Generating scores users x items (an hour at 1M x 200k here): on a terminal a bar counts the
    users; the interactions are the same with it."""
    import sys

    from graphdist.rec import synth
    quiet = load_ratings("rec-synth:users=300,items=200,avg_items=10,seed=4")
    assert "rec-synth" not in capsys.readouterr().err  # small, and not a terminal
    monkeypatch.setattr(synth, "_BAR_CELLS", 1000)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    shown = load_ratings("rec-synth:users=300,items=200,avg_items=10,seed=4")
    err = capsys.readouterr().err
    assert "rec-synth" in err and "300/300" in err
    assert torch.equal(quiet.train, shown.train) and torch.equal(quiet.test, shown.test)


def test_data_info_ratings(tmp_path, capsys):
    f = tmp_path / "u.data"
    f.write_text(UDATA)
    assert main(["data", "info", f"ratings:{f},min_rating=4"]) == 0
    out = capsys.readouterr().out
    for key in ("users", "items", "interactions", "density", "split train/test", "fingerprint"):
        assert key in out
    assert "7" in out.split("users")[1].splitlines()[0]


def _fake_ml100k(root):
    """A small file in the exact ml-100k u.data format (and u1.base / u1.test beside it)."""
    g = np.random.default_rng(0)
    d = root / "ml-100k"
    d.mkdir()
    rows = {(int(u), int(i)): (int(g.integers(1, 6)), 874724710 + k)
            for k, (u, i) in enumerate(zip(g.integers(1, 41, 600), g.integers(1, 61, 600)))}
    lines = [f"{u}\t{i}\t{r}\t{t}\n" for (u, i), (r, t) in rows.items()]
    (d / "u.data").write_text("".join(lines))
    (d / "u1.base").write_text("".join(lines[:400]))
    (d / "u1.test").write_text("".join(lines[400:]))
    return d


def test_readme_movielens_commands(tmp_path, monkeypatch, capfd):
    """The README's ml-100k commands, as written, on a file in u.data's format."""
    _fake_ml100k(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["data", "info", "ratings:ml-100k/u.data,min_rating=4"]) == 0
    r = load_ratings("ratings:ml-100k/u.data,min_rating=4")
    text = (tmp_path / "ml-100k" / "u.data").read_text().splitlines()
    assert r.train.shape[0] + r.test.shape[0] == sum(int(ln.split("\t")[2]) >= 4 for ln in text)
    fixed = load_ratings("ratings:ml-100k/u1.base,split=u1.test")
    assert fixed.train.shape[0] <= 400 and fixed.test.shape[0] <= 200
    argv = ("train-rec ratings:ml-100k/u.data,min_rating=4 --parts 2 --method metis "
            "--epochs 200 --eval-every 20 --report runs/rec/ml100k.json").split()
    assert main(argv) == 0, capfd.readouterr().err[-3000:]
    import json
    rep = json.loads((tmp_path / "runs/rec/ml100k.json").read_text())
    assert rep["world_size"] == 2 and len(rep["losses"]) == 200 and len(rep["eval"]) == 10


def test_gzip_and_comments(tmp_path):
    import gzip
    f = tmp_path / "log.tsv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("# user item\n1\t5\n2\t5\n\n2\t6\n")
    r = load_ratings(f"ratings:{f},test=0.4")
    assert (r.num_users, r.num_items) == (2, 2) and r.train.shape[0] + r.test.shape[0] == 3
