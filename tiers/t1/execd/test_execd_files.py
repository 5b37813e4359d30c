"""Files and directories routes of the mock execd (recording 13/18; execd filesystem controllers)."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import re

import pytest

from mock_opensandbox.wire import formdata as multipart
from tiers.t1.conftest_execd import Client, outputs

SHARED = pathlib.Path(__file__).resolve().parents[4] / "shared" / "live" / "exchanges"
TS = re.compile(r'"(modified_at|created_at)":"[^"]+"')


@pytest.fixture
def c(make_execd):
    return Client(make_execd().port)


def upload(c: Client, items, boundary=None, extra=()):
    fields = []
    for path, data, meta in items:
        m = {"path": path}
        m.update(meta or {})
        fields.append(("metadata", "metadata", "application/json", json.dumps(m).encode()))
        fields.append(("file", os.path.basename(path) or "f", "application/octet-stream", data))
    fields.extend(extra)
    body, ctype = multipart.encode(fields, boundary)
    return c.post("/files/upload", body, headers={"Content-Type": ctype})


@pytest.mark.skipif(not (SHARED / "13_files_and_directories.json").exists(), reason="recordings not available")
def test_replay_recording_13(c):
    for ex in json.loads((SHARED / "13_files_and_directories.json").read_text()):
        rq, rs = ex["request"], ex["response"]
        hdr = {k: v for k, v in rq["headers"].items() if k.lower() not in ("host", "content-length", "accept-encoding")}
        r = c.request(
            rq["method"],
            rq["path"],
            rq["body"].encode() if rq["body"] is not None else None,
            headers=hdr,
            raw_path=True,
        )
        assert r.status == rs["status"], rq["path"]
        assert TS.sub("T", r.text) == TS.sub("T", rs["body"]), rq["path"]
        for name in ("Content-Type", "Content-Disposition", "Accept-Ranges", "Content-Range", "Content-Length"):
            want = rs["headers"].get(name)
            if name == "Content-Length" and TS.search(rs["body"]):
                continue  # timestamps differ in length
            assert r.header(name) == want, (rq["path"], name)
        if "Last-Modified" in rs["headers"]:
            assert re.match(r"^\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT$", r.header("Last-Modified"))


def test_upload_download_byte_exact(c):
    blobs = {
        "/tmp/bin/zero.bin": b"\x00\xff\r\n--x\r\n" * 100,
        "/tmp/bin/empty": b"",
        "/workspace/big.bin": os.urandom(3 * 1024 * 1024 + 7),
    }
    assert upload(c, [(p, d, None) for p, d in blobs.items()]).status == 200
    for p, d in blobs.items():
        r = c.get(f"/files/download?path={p}")
        assert r.status == 200 and r.body == d
        assert r.header("Content-Length") == str(len(d))
    info = c.get("/files/info?path=/tmp/bin/zero.bin").json()["/tmp/bin/zero.bin"]
    assert info["mode"] == 755 and info["type"] == "file" and info["size"] == len(blobs["/tmp/bin/zero.bin"])


def test_upload_over_an_existing_file_leaves_exactly_the_new_bytes(c):
    """The mock writes over an existing file and cuts it to the new length (files._write_over) where execd
    opens it O_TRUNC: shorter, empty, longer and equal uploads read back byte for byte, mode kept."""
    p = "/tmp/over/f.bin"
    for data in (os.urandom(200_000), b"short", b"", os.urandom(70_001), os.urandom(70_001)):
        assert upload(c, [(p, data, None)]).status == 200
        r = c.get(f"/files/download?path={p}")
        assert r.status == 200 and r.body == data and r.header("Content-Length") == str(len(data))
    assert upload(c, [(p, b"x" * 10, {"mode": 600})]).status == 200
    assert upload(c, [(p, b"y", None)]).status == 200
    info = c.get(f"/files/info?path={p}").json()[p]
    assert info["size"] == 1 and info["mode"] == 600  # an existing file keeps its mode, as O_TRUNC keeps it


def test_upload_through_a_dangling_symlink_and_to_a_device(c):
    """O_CREATE follows a dangling symlink (the target is made); a character device takes the write and is
    not cut (O_TRUNC does nothing to one)."""
    assert c.run("mkdir -p /tmp/ln && ln -sf /tmp/ln/target /tmp/ln/link").status == 200
    assert upload(c, [("/tmp/ln/link", b"via link", None)]).status == 200
    assert c.get("/files/download?path=/tmp/ln/target").body == b"via link"
    assert upload(c, [("/dev/null", b"gone", None)]).status == 200
    assert c.get("/files/download?path=/dev/null").body == b""


def test_download_ranges_of_a_large_file_by_sendfile(c):
    """A download goes out by sendfile(2) (connection._FrozenWriter.sendfile), the observers still get the
    bytes: whole, a range in the middle, a suffix range, byte for byte."""
    data = os.urandom(300_000)
    assert upload(c, [("/tmp/sf.bin", data, None)]).status == 200
    r = c.get("/files/download?path=/tmp/sf.bin")
    assert r.status == 200 and r.body == data
    r = c.get("/files/download?path=/tmp/sf.bin", headers={"Range": "bytes=65530-200000"})
    assert r.status == 206 and r.body == data[65530:200001]
    r = c.get("/files/download?path=/tmp/sf.bin", headers={"Range": "bytes=-70000"})
    assert r.status == 206 and r.body == data[-70000:]


def test_upload_mode_and_sdk_shape(c):
    assert (
        upload(
            c,
            [
                ("/tmp/sdk.txt", b"hello from sdk\n", {"owner": None, "group": None, "mode": 755}),
                ("/tmp/m.txt", b"x", {"mode": 600}),
            ],
        ).status
        == 200
    )
    info = c.get("/files/info?path=/tmp/sdk.txt&path=/tmp/m.txt").json()
    assert info["/tmp/sdk.txt"]["mode"] == 755 and info["/tmp/m.txt"]["mode"] == 600
    r = c.get("/files/download?path=%2Ftmp%2Fsdk.txt")
    assert r.body == b"hello from sdk\n"
    assert r.header("Content-Disposition") == 'attachment; filename="sdk.txt"'


@pytest.mark.parametrize(
    "fields,code,message",
    [
        (
            [("metadata", None, None, b'{"path":"/tmp/a"}'), ("file", "a", None, b"x")],
            "INVALID_FILE_METADATA",
            "metadata file is missing",
        ),
        ([("metadata", "metadata", None, b'{"path":"/tmp/a"}')], "INVALID_FILE_CONTENT", "file is missing"),
        (
            [
                ("metadata", "metadata", None, b'{"path":"/tmp/a"}'),
                ("metadata", "metadata", None, b'{"path":"/tmp/b"}'),
                ("file", "a", None, b"x"),
            ],
            "INVALID_FILE",
            "metadata and file count mismatch: 2 vs 1",
        ),
        (
            [("metadata", "metadata", None, b'{"path":'), ("file", "a", None, b"x")],
            "INVALID_FILE_METADATA",
            "invalid metadata format. unexpected end of JSON input",
        ),
        (
            [("metadata", "metadata", None, b'{"mode":644}'), ("file", "a", None, b"x")],
            "INVALID_FILE_METADATA",
            "metadata path is empty",
        ),
    ],
)
def test_upload_errors(c, fields, code, message):
    body, ctype = multipart.encode(fields)
    r = c.post("/files/upload", body, headers={"Content-Type": ctype})
    assert r.status == 400 and r.json() == {"code": code, "message": message}


def test_upload_not_multipart(c):
    r = c.post("/files/upload", {}, headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json() == {"code": "INVALID_FILE", "message": "multipart form is empty"}


@pytest.mark.spec_exempt("the binary's 416 for a malformed Range declares a length and sends no body (tiers/diff)")
def test_range_variants(c):
    upload(c, [("/tmp/r.txt", b"0123456789", None)])
    r = c.get("/files/download?path=/tmp/r.txt", headers={"Range": "bytes=-3"})
    assert (r.status, r.body, r.header("Content-Range")) == (206, b"789", "bytes 7-9/10")
    r = c.get("/files/download?path=/tmp/r.txt", headers={"Range": "bytes=4-"})
    assert (r.status, r.body) == (206, b"456789")
    # malformed: RespondError(416, UNKNOWN) after the download headers were set; the JSON is longer
    # than the declared Content-Length, Go writes none of it and closes (tiers/diff files.download)
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
    try:
        conn.request("GET", c.prefix + "/files/download?path=/tmp/r.txt", headers={"Range": "items=1-2"})
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Content-Length"), resp.getheader("Content-Type")) == (
            416,
            "10",
            "application/octet-stream",
        )
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        conn.close()
    r = c.get("/files/download?path=/tmp/r.txt", headers={"Range": "bytes=50-60"})
    assert r.status == 416 and r.header("Content-Range") == "bytes */10"
    r = c.get("/files/download?path=/tmp/r.txt&offset=1&limit=1")
    assert r.status == 200 and r.body == b"0123456789"


def test_mv_semantics(c):
    upload(c, [("/tmp/a.txt", b"a", None), ("/tmp/b.txt", b"b", None)])
    r = c.post("/files/mv", [{"src": "/tmp/a.txt", "dest": "/tmp/b.txt"}])
    assert r.status == 500
    assert r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error accessing file: destination path already exists: /tmp/b.txt",
    }
    r = c.post("/files/mv", [{"src": "/tmp/a.txt", "dest": "/tmp/new/deeper/a.txt"}])
    assert r.status == 200
    assert c.get("/files/download?path=/tmp/new/deeper/a.txt").body == b"a"
    r = c.post("/files/mv", [{"src": "/tmp/missing", "dest": "/tmp/x"}])
    assert r.status == 404
    assert r.json()["message"] == (
        "file not found. source path not found: /tmp/missing: stat /tmp/missing: no such file or directory"
    )
    r = c.post("/files/mv", {"src": "/a", "dest": "/b"})
    assert r.status == 400 and r.json()["message"] == (
        "error parsing request, MAYBE invalid body format. json: "
        "cannot unmarshal object into Go value of type []model.RenameFileItem"
    )


def test_delete_semantics(c):
    assert c.post("/directories", {"/tmp/d1/d2": {"mode": 700}}).status == 200
    r = c.delete("/files?path=/tmp/d1")
    assert r.status == 500 and r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error removing file /tmp/d1. path is a directory: /tmp/d1",
    }
    assert c.delete("/files?path=/tmp/never-there").status == 200
    info = c.get("/files/info?path=/tmp/d1&path=/tmp/d1/d2").json()
    assert info["/tmp/d1"]["mode"] == 755 and info["/tmp/d1/d2"]["mode"] == 700
    assert c.delete("/directories?path=/tmp/d1").status == 200
    r = c.get("/directories/list?path=/tmp/d1")
    assert r.status == 404 and r.json() == {
        "code": "FILE_NOT_FOUND",
        "message": "file not found. lstat /tmp/d1: no such file or directory",
    }
    assert c.delete("/directories?path=/tmp/d1").status == 200


def test_list_and_search(c):
    upload(
        c,
        [
            ("/workspace/p/a.py", b"1", None),
            ("/workspace/p/sub/b.py", b"2", None),
            ("/workspace/p/sub/c.txt", b"3", None),
        ],
    )
    lst = c.get("/directories/list?path=/workspace/p").json()
    assert [e["path"] for e in lst] == ["/workspace/p/a.py", "/workspace/p/sub"]
    deep = c.get("/directories/list?path=/workspace/p&depth=5").json()
    assert [e["path"] for e in deep] == [
        "/workspace/p/a.py",
        "/workspace/p/sub",
        "/workspace/p/sub/b.py",
        "/workspace/p/sub/c.txt",
    ]
    assert c.get("/directories/list?path=/workspace/p&depth=0").json() == []
    r = c.get("/directories/list?path=/workspace/p&depth=x")
    assert r.status == 400 and r.json()["message"] == "invalid query parameter 'depth': x"
    r = c.get("/directories/list?path=/workspace/p/a.py")
    assert r.status == 400 and r.json()["message"] == "path is not a directory: /workspace/p/a.py"
    found = c.get("/files/search?path=/workspace/p&pattern=**/*.py").json()
    assert [e["path"] for e in found] == ["/workspace/p/a.py", "/workspace/p/sub/b.py"]
    assert len(c.get("/files/search?path=/workspace/p").json()) == 3
    r = c.get("/files/search?path=/workspace/nope")
    assert r.status == 404 and r.json()["message"] == "file not found. stat /workspace/nope: no such file or directory"
    assert c.get("/files/search").json() == {"code": "MISSING_QUERY", "message": "missing query parameter 'path'"}


def test_permissions_and_replace(c):
    upload(c, [("/tmp/p.txt", b"foo bar foo", None)])
    assert c.post("/files/permissions", {"/tmp/p.txt": {"mode": 640}}).status == 200
    assert c.get("/files/info?path=/tmp/p.txt").json()["/tmp/p.txt"]["mode"] == 640
    r = c.post("/files/permissions", {"/tmp/none": {"mode": 640}})
    assert r.status == 500 and r.json()["message"] == (
        "error changing permissions for /tmp/none. chmod /tmp/none: no such file or directory"
    )
    r = c.post("/files/replace?verbose=true", {"/tmp/p.txt": {"old": "foo", "new": "baz"}})
    assert r.status == 200 and r.json() == {"/tmp/p.txt": {"replacedCount": 2}}
    assert c.get("/files/download?path=/tmp/p.txt").body == b"baz bar baz"
    r = c.post("/files/replace", {"/tmp/p.txt": {"old": "", "new": "x"}})
    assert r.status == 400 and r.json()["message"] == "old content must not be empty"


def test_files_api_cannot_escape_root(c, runtime, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("host secret")
    root = pathlib.Path(runtime.root)
    os.symlink("/etc", root / "tmp" / "etc-link")
    os.symlink(str(tmp_path), root / "tmp" / "abs-link")  # absolute host path: means <root>/<that path>
    os.symlink("../../../../../../..", root / "tmp" / "up")
    for p in [
        "/../../../../" + str(secret),
        "/tmp/abs-link/outside.txt",
        "/tmp/up" + str(secret),
        "/tmp/up/../../../" + str(secret),
    ]:
        r = c.get(f"/files/download?path={p}")
        assert r.status == 404, p
        assert b"host secret" not in r.body
    # writing through an escaping symlink lands inside the root
    assert upload(c, [("/tmp/etc-link/evil.conf", b"x", None)]).status == 200
    assert not os.path.exists("/etc/evil.conf")
    # ... in the sandbox's own /etc (its overlay in the view, or <root>/etc without one)
    assert pathlib.Path(runtime.resolve("/etc/evil.conf")).read_bytes() == b"x"
    assert c.get("/files/download?path=/etc/evil.conf").body == b"x"
    assert upload(c, [("/../../../../tmp/escape-attempt.txt", b"y", None)]).status == 200
    assert (root / "tmp" / "escape-attempt.txt").read_bytes() == b"y"
    r = c.get("/directories/list?path=/tmp/up")
    assert r.status == 400 and "symbolic link" in r.json()["message"]
    os.symlink("loop-b", root / "tmp" / "loop-a")
    os.symlink("loop-a", root / "tmp" / "loop-b")
    r = c.get("/files/download?path=/tmp/loop-a")
    assert r.status == 500 and "too many levels of symbolic links" in r.json()["message"]


def test_files_visible_to_commands(c, runtime):
    if not runtime.isolated:
        pytest.skip("commands do not share absolute paths when isolation is unavailable: " + runtime.isolation_note)
    upload(
        c, [("/tmp/v.txt", b"in-tmp", None), ("/home/u/v.txt", b"in-home", None), ("/workspace/v.txt", b"in-ws", None)]
    )
    ev = c.run(
        "cat /tmp/v.txt; echo; cat /home/u/v.txt; echo; cat /workspace/v.txt; echo; echo made > /tmp/from-cmd"
    ).events()
    assert outputs(ev) == ["in-tmp", "in-home", "in-ws"]
    assert c.get("/files/download?path=/tmp/from-cmd").body == b"made\n"


def test_line_mode_memory_is_bounded(make_execd, sandbox_root):
    """serveLineRange reads line by line (filesystem_download.go, 3bb6fad): a 64 MiB file without a
    newline is scanned, never held; a line longer than the hold (1 MiB) comes out whole and trimmed."""
    import tracemalloc

    c = Client(make_execd().port)
    tmp = pathlib.Path(sandbox_root) / "tmp"
    tmp.mkdir(exist_ok=True)
    with open(tmp / "flat", "wb") as fh:
        fh.truncate(64 << 20)  # 64 MiB of zeros, no newline
    long = b"x" * (3 << 20)
    (tmp / "long").write_bytes(b"a\r\n" + long + b"\r\r\n" + b"tail")
    tracemalloc.start()
    try:
        r = c.get("/files/download?path=/tmp/flat&offset=2&limit=1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (r.status, r.body) == (200, b"")
    assert peak < 8 << 20, peak  # the old code read the file whole: > 64 MiB
    r = c.get("/files/download?path=/tmp/long&offset=2&limit=1")
    assert r.status == 200 and r.body == long
    r = c.get("/files/download?path=/tmp/long&offset=1")
    assert r.status == 200 and r.body == b"a\n" + long + b"\ntail"
