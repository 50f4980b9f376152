"""mrcswitch.statsfile: atomic writes from a thread, the final document last."""

from __future__ import annotations

import json

from mrcswitch.statsfile import StatsWriter, write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_temp(tmp_path):
    p = tmp_path / "s.json"
    write_atomic(str(p), b'{"a": 1}')
    write_atomic(str(p), b'{"a": 2}')
    assert json.loads(p.read_text()) == {"a": 2}
    assert [x.name for x in tmp_path.iterdir()] == ["s.json"]


def test_writer_writes_the_newest_and_the_final_document_last(tmp_path):
    p = tmp_path / "s.json"
    w = StatsWriter(str(p))
    for i in range(200):
        w.submit(json.dumps({"n": i}).encode())
    w.close(json.dumps({"n": "final"}).encode())
    assert json.loads(p.read_text()) == {"n": "final"}
    assert not w._thread.is_alive()


def test_writer_close_without_final_flushes_the_pending_document(tmp_path):
    p = tmp_path / "s.json"
    w = StatsWriter(str(p))
    w.submit(b'{"ready": true}')
    w.close()
    assert json.loads(p.read_text()) == {"ready": True}


def test_unwritable_path_is_logged_not_raised(tmp_path, caplog):
    w = StatsWriter(str(tmp_path / "missing-dir" / "s.json"))
    w.submit(b"{}")
    w.close(b"{}")
    assert "cannot write stats" in caplog.text
