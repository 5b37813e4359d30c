"""The differential corpus's /files and /directories cases (execd controller/filesystem*.go; every
path under the case's own ``ctx.dir``); diff/corpus.py puts them into ``CASES`` in their place."""

from __future__ import annotations

import json
from typing import Any

from differential.harness import Case, Ctx, case_collector

__all__ = ["CASES"]

CASES: list[Case] = []
case = case_collector(CASES)


def _tree(c: Ctx) -> None:
    c.mkdir("t/sub/deeper")
    c.write("t/a.txt", "alpha\n")
    c.write("t/b.csv", "1,2\n3,4\n", 0o600)
    c.write("t/sub/c.csv", "x")
    c.write("t/sub/deeper/d.txt", "")
    c.write("t/ünï côdé.txt", "u")
    c.symlink("t/link", "a.txt")
    c.symlink("t/dangling", "nope")
    c.symlink("t/dirlink", "sub")


@case("files.info", "GET /files/info")
def _info(c: Ctx) -> None:
    _tree(c)
    c.get("/files/info", label="no path")
    c.get("/files/info", query=[("path", c.p("t/a.txt"))], label="file")
    c.get("/files/info", query=[("path", c.p("t"))], label="dir")
    c.get("/files/info", query=[("path", c.p("t/link"))], label="symlink")
    c.get("/files/info", query=[("path", c.p("t/dangling"))], label="dangling symlink")
    c.get("/files/info", query=[("path", c.p("t/ünï côdé.txt"))], label="unicode name")
    c.get("/files/info", query=[("path", c.p("t/a.txt")), ("path", c.p("t/b.csv"))], label="two paths")
    c.get("/files/info", query=[("path", c.p("t/a.txt")), ("path", c.p("t/a.txt"))], label="same path twice")
    c.get("/files/info", query=[("path", c.p("t/missing"))], label="missing")
    c.get("/files/info", query=[("path", c.p("t/a.txt")), ("path", c.p("t/missing"))], label="one missing")
    c.get("/files/info", query=[("path", c.p("t/a.txt/x"))], label="under a file")
    c.get("/files/info", query=[("path", c.p("t/./sub/../a.txt"))], label="unclean path")
    c.get("/files/info", query=[("path", c.p("t/sub/"))], label="trailing slash")
    c.get("/files/info", query=[("path", "")], label="empty path")
    c.get("/files/info", query=[("path", "diff/" + c.dir.split("/")[-1] + "/t/a.txt")], label="relative path")
    c.get("/files/info", query=[("path", c.p("t/$NOPE"))], label="undefined env var")
    c.get("/files/info", query=[("path", c.p("t/${HOME}"))], label="env var in path")
    c.get("/files/info", query=[("path", c.p("t/a\x00b"))], label="nul byte")
    c.get("/files/info", query=[("path", c.p("t/" + "x" * 300))], label="name too long")


@case(
    "files.view",
    "GET /files/info",
    "GET /files/download",
    "GET /files/search",
    "POST /files/upload",
    "POST /directories",
    "DELETE /files",
    "POST /files/permissions",
    "POST /command",
)
def _view(c: Ctx) -> None:
    """The sandbox's own view (QUIRKS.md, Files and directories, "Files and view"): the image's /etc and the read-only system directories."""
    c.get("/files/info", query=[("path", "/etc/os-release")], label="info /etc/os-release (a symlink)")
    c.get("/files/info", query=[("path", "/usr/lib/os-release"), ("path", "/usr/bin")], label="info /usr")
    c.get("/files/info", query=[("path", "/var/log"), ("path", "/run/lock")], label="info image dirs")
    c.get("/files/download", query={"path": "/etc/os-release"}, label="download /etc/os-release")
    c.get("/files/download", query={"path": "/etc/passwd"}, label="download /etc/passwd")
    c.get("/files/search", query={"path": "/usr/lib", "pattern": "os-release"}, label="search /usr/lib")
    _upload(
        c,
        "upload into read-only /usr",
        [("metadata", "m", _meta("/usr/osb-diff-upload"), None), ("file", "f", b"x", None)],
    )
    c.post("/directories", {"/usr/osb-diff-dir": {"mode": 755}}, label="mkdir in read-only /usr")
    c.req("DELETE", "/files", query={"path": "/usr/lib/os-release"}, label="delete in read-only /usr")
    c.post("/files/permissions", {"/usr/lib/os-release": {"mode": 600}}, label="chmod in read-only /usr")
    for wd in ("/usr/lib", "/var/log", "/opt", "/etc"):
        c.post("/command", {"command": "pwd", "cwd": wd}, label=f"cwd {wd}")


@case("files.download", "GET /files/download")
def _download(c: Ctx) -> None:
    c.write("f/ten.bin", b"0123456789")
    c.write("f/empty", b"")
    c.write("f/lines.txt", b"one\ntwo\r\nthree\n\nfive")
    c.write("f/ünï.txt", b"u")
    c.write('f/sp ace"q.txt', b"q")
    c.mkdir("f/dir")
    ten = c.p("f/ten.bin")
    c.get("/files/download", label="no path")
    c.get("/files/download", query={"path": ten}, label="whole")
    c.get("/files/download", query={"path": c.p("f/empty")}, label="empty file")
    c.get("/files/download", query={"path": c.p("f/ünï.txt")}, label="unicode name")
    c.get("/files/download", query={"path": c.p('f/sp ace"q.txt')}, label="quote in name")
    c.get("/files/download", query={"path": c.p("f/missing")}, label="missing")
    c.get("/files/download", query={"path": c.p("f/dir")}, label="directory", timeout=5)
    c.get("/files/download", query={"path": c.p("f/$NOPE")}, label="undefined env var")
    c.write("f/big.bin", bytes(range(256)) * 1000)  # more than one sendfile piece (64 KiB) on the mock
    big = c.p("f/big.bin")
    c.get("/files/download", query={"path": big}, label="big whole")
    c.get("/files/download", query={"path": big}, headers=[("Range", "bytes=65530-70000")], label="big range")
    c.get("/files/download", query={"path": big}, headers=[("Range", "bytes=-70000")], label="big suffix")
    for rng in (
        "bytes=0-3",
        "bytes=5-",
        "bytes=-3",
        "bytes=-0",
        "bytes=0-0",
        "bytes=9-9",
        "bytes=10-",
        "bytes=8-100",
        "bytes=3-1",
        "bytes=0-1,4-5",
        "bytes=,",
        "bytes=",
        "bytes=x-y",
        "bytes=1",
        "items=0-1",
        "bytes= 2 - 4 ",
        "bytes=-",
        "bytes=-100",
        "bytes=100-200",
        "bytes=100-200,1-2",
        "bytes=+1-2",
        "bytes=01-02",
    ):
        c.get("/files/download", query={"path": ten}, headers=[("Range", rng)], label=f"range {rng}")
    c.get("/files/download", query={"path": c.p("f/empty")}, headers=[("Range", "bytes=0-")], label="range empty file")
    c.get("/files/download", query={"path": c.p("f/empty")}, headers=[("Range", "bytes=-1")], label="suffix empty file")
    c.get(
        "/files/download",
        query={"path": ten},
        headers=[("If-Modified-Since", "Mon, 01 Jan 2livro")],
        label="bad if-modified-since",
    )
    c.get(
        "/files/download",
        query={"path": ten},
        headers=[("If-Modified-Since", "Tue, 01 Dec 2099 00:00:00 GMT")],
        label="if-modified-since future",
    )
    c.get("/files/download", query={"path": ten}, headers=[("If-None-Match", "*")], label="if-none-match")
    c.get("/files/download", query={"path": ten}, headers=[("If-Range", "x"), ("Range", "bytes=0-1")], label="if-range")
    lines = c.p("f/lines.txt")
    for q in (
        {"offset": "1", "limit": "2"},
        {"offset": "2"},
        {"limit": "1"},
        {"offset": "3", "limit": "100"},
        {"offset": "0", "limit": "1"},
        {"offset": "x"},
        {"limit": "-1"},
        {"limit": "0"},
        {"offset": "9", "limit": "1"},
        {"offset": "+2"},
        {"offset": " 1"},
        {"offset": "1", "limit": "1.5"},
    ):
        c.get("/files/download", query=dict(q, path=lines), label="lines " + "&".join(f"{k}={v}" for k, v in q.items()))
    c.get(
        "/files/download",
        query={"path": lines, "offset": "1"},
        headers=[("Range", "bytes=0-1")],
        label="lines and range",
    )
    c.get("/files/download", query={"path": c.p("f/missing"), "offset": "1"}, label="lines missing file")
    c.req("HEAD", "/files/download", query={"path": ten}, label="HEAD")


@case("files.delete", "DELETE /files")
def _delete_files(c: Ctx) -> None:
    _tree(c)
    c.delete("/files", label="no path")
    c.delete("/files", query=[("path", c.p("t/a.txt"))], label="file")
    c.delete("/files", query=[("path", c.p("t/a.txt"))], label="again (missing)")
    c.delete("/files", query=[("path", c.p("t/sub"))], label="directory")
    c.delete("/files", query=[("path", c.p("t/link"))], label="dangling after delete")
    c.delete("/files", query=[("path", c.p("t/dirlink"))], label="symlink to dir")
    c.delete(
        "/files",
        query=[("path", c.p("t/b.csv")), ("path", c.p("t/sub")), ("path", c.p("t/sub/c.csv"))],
        label="second of three fails",
    )
    c.delete("/files", query=[("path", c.p("t/$NOPE"))], label="undefined env var")
    c.delete("/files", query=[("path", c.p("t/sub/c.csv/x"))], label="under a file")
    c.snapshot("t", "fs after deletes")


@case("directories.delete", "DELETE /directories")
def _delete_dirs(c: Ctx) -> None:
    _tree(c)
    c.delete("/directories", label="no path")
    c.delete("/directories", query=[("path", c.p("t/sub"))], label="dir")
    c.delete("/directories", query=[("path", c.p("t/sub"))], label="again")
    c.delete("/directories", query=[("path", c.p("t/a.txt"))], label="a file")
    c.delete("/directories", query=[("path", c.p("t/dirlink"))], label="symlink to dir")
    c.delete("/directories", query=[("path", c.p("t/$NOPE"))], label="undefined env var")
    c.delete("/directories", query=[("path", c.p("t/b.csv/x"))], label="under a file")
    c.snapshot("t", "fs after deletes")


@case("directories.make", "POST /directories")
def _mkdirs(c: Ctx) -> None:
    c.write("afile", "x")
    c.post("/directories", {c.p("d1"): {"mode": 755}}, label="one")
    c.post("/directories", {c.p("d2/a/b"): {"mode": 700}}, label="nested mode 700")
    c.post("/directories", {c.p("d1"): {"mode": 700}}, label="existing keeps mode")
    c.post("/directories", {c.p("d3"): {}}, label="no mode")
    c.post("/directories", {c.p("d4"): {"mode": 0}}, label="mode 0")
    c.post("/directories", {c.p("d5"): {"mode": 1777}}, label="mode 1777")
    c.post("/directories", {c.p("d6"): {"mode": 789}}, label="mode not octal")
    c.post("/directories", {c.p("d7"): {"mode": -1}}, label="mode negative")
    c.post("/directories", {c.p("d8"): {"owner": "nobody", "group": "nogroup"}}, label="owner nobody")
    c.post("/directories", {c.p("d9"): {"owner": "no-such-user-x"}}, label="unknown owner")
    c.post("/directories", {c.p("d10"): {"group": "no-such-group-x"}}, label="unknown group")
    c.post("/directories", {c.p("afile/sub"): {}}, label="under a file")
    c.post("/directories", {c.p("afile"): {}}, label="is a file")
    c.post("/directories", {c.p("$NOPE"): {}}, label="undefined env var")
    c.post("/directories", {}, label="empty map")
    c.post("/directories", [], label="array")
    c.post("/directories", {c.p("d11"): {"mode": "755"}}, label="mode string")
    c.post("/directories", {c.p("d12"): None}, label="null permission")
    c.post("/directories", {c.p("d13"): 5}, label="number permission")
    c.req("POST", "/directories", body=b"", label="empty body")
    c.req("POST", "/directories", body=b"{", headers=[("Content-Type", "application/json")], label="truncated")
    c.snapshot("", "fs after mkdirs")


@case("directories.list", "GET /directories/list")
def _list(c: Ctx) -> None:
    # a tree whose listings stay well below Go's 2048-byte buffer (times vary in length); the
    # "big" directory is well above it (chunked)
    c.mkdir("t/sub/deeper")
    c.write("t/a.txt", "alpha\n")
    c.write("t/sub/c.csv", "x")
    c.symlink("t/dirlink", "sub")
    for i in range(24):
        c.write(f"big/file-{i:02d}-{'x' * 40}", "")
    c.get("/directories/list", query={"path": c.p("big")}, label="big listing")
    t = c.p("t")
    c.get("/directories/list", label="no path")
    c.get("/directories/list", query={"path": t}, label="depth default")
    for d in ("0", "1", "2", "3", "100", "-1", "x", "1.5", "+1", " 1"):
        c.get("/directories/list", query={"path": t, "depth": d}, label=f"depth {d}")
    c.get("/directories/list", query={"path": c.p("t/a.txt")}, label="a file")
    c.get("/directories/list", query={"path": c.p("t/dirlink")}, label="symlink root")
    c.get("/directories/list", query={"path": c.p("t/missing")}, label="missing")
    c.get("/directories/list", query={"path": c.p("t/$NOPE")}, label="undefined env var")
    c.get("/directories/list", query={"path": c.p("t/sub/")}, label="trailing slash")
    c.mkdir("empty")
    c.get("/directories/list", query={"path": c.p("empty")}, label="empty dir")


@case("files.search", "GET /files/search")
def _search(c: Ctx) -> None:
    _tree(c)
    t = c.p("t")
    c.get("/files/search", label="no path")
    c.get("/files/search", query={"path": t}, label="default pattern")
    for pat in (
        "*.csv",
        "**/*.csv",
        "*.txt",
        "?.txt",
        "[ab].*",
        "[!a]*",
        "{a,b}.*",
        "*",
        "**",
        "sub",
        "c.csv",
        "[",
        "\\",
        "*.{csv",
        "ü*",
        "D.TXT",
        "link",
        "dangling",
        "!",
        "!x",
        "!(a).txt",
        "*.!(csv)",
        "!(*.csv)",
        "a!b",
        "[!a]*.txt",
    ):
        c.get("/files/search", query={"path": t, "pattern": pat}, label=f"pattern {pat}")
    c.get("/files/search", query={"path": c.p("t/a.txt")}, label="path is a file")
    c.get("/files/search", query={"path": c.p("t/missing")}, label="missing")
    c.get("/files/search", query={"path": c.p("t/dirlink")}, label="symlink root")
    c.get("/files/search", query={"path": c.p("t/$NOPE")}, label="undefined env var")


@case("files.mv", "POST /files/mv")
def _mv(c: Ctx) -> None:
    _tree(c)
    c.post("/files/mv", [{"src": c.p("t/a.txt"), "dest": c.p("t/moved.txt")}], label="rename")
    c.post("/files/mv", [{"src": c.p("t/b.csv"), "dest": c.p("t/new/dir/b.csv")}], label="into new dirs")
    c.post("/files/mv", [{"src": c.p("t/missing"), "dest": c.p("t/x")}], label="missing src")
    c.post("/files/mv", [{"src": c.p("t/moved.txt"), "dest": c.p("t/sub/c.csv")}], label="dest exists")
    c.post("/files/mv", [{"src": c.p("t/sub"), "dest": c.p("t/sub2")}], label="directory")
    c.post("/files/mv", [{"src": c.p("t/link"), "dest": c.p("t/link2")}], label="symlink")
    c.post("/files/mv", [{"src": c.p("t/sub2"), "dest": c.p("t/sub2/inside")}], label="into itself")
    c.post("/files/mv", [{"src": c.p("t/moved.txt"), "dest": c.p("t/moved.txt/x")}], label="dest under a file")
    c.post("/files/mv", [{"src": c.p("t/$NOPE"), "dest": c.p("t/x")}], label="undefined env var src")
    c.post("/files/mv", [{"src": "", "dest": ""}], label="empty paths")
    c.post("/files/mv", [], label="empty list")
    c.post("/files/mv", {}, label="object")
    c.post("/files/mv", [None], label="null item")
    c.post("/files/mv", [{"src": 1}], label="src number")
    c.req("POST", "/files/mv", body=b"", label="empty body")
    c.snapshot("t", "fs after mv")


@case("files.permissions", "POST /files/permissions")
def _perms(c: Ctx) -> None:
    _tree(c)
    c.post("/files/permissions", {c.p("t/a.txt"): {"mode": 600}}, label="chmod 600")
    c.post("/files/permissions", {c.p("t/b.csv"): {"mode": 4755}}, label="chmod 4755")
    c.post("/files/permissions", {c.p("t/a.txt"): {"mode": 0}}, label="mode 0 keeps")
    c.post("/files/permissions", {c.p("t/a.txt"): {"mode": 888}}, label="mode not octal")
    c.post("/files/permissions", {c.p("t/a.txt"): {"owner": "nobody"}}, label="owner nobody")
    c.post("/files/permissions", {c.p("t/a.txt"): {"group": "nogroup"}}, label="group nogroup")
    c.post("/files/permissions", {c.p("t/a.txt"): {"owner": "no-such-user-x"}}, label="unknown owner")
    c.post("/files/permissions", {c.p("t/a.txt"): {"group": "no-such-group-x"}}, label="unknown group")
    c.post("/files/permissions", {c.p("t/missing"): {"mode": 644}}, label="missing")
    c.post("/files/permissions", {c.p("t/missing"): {}}, label="missing no change")
    c.post("/files/permissions", {c.p("t/dangling"): {"owner": "nobody"}}, label="chown dangling")
    c.post("/files/permissions", {c.p("t/$NOPE"): {"mode": 644}}, label="undefined env var")
    c.post("/files/permissions", [], label="array")
    c.post("/files/permissions", {c.p("t/a.txt"): {"mode": 1.5}}, label="mode float")
    c.snapshot("t", "fs after chmod")


@case("files.replace", "POST /files/replace")
def _replace(c: Ctx) -> None:
    c.write("r/a.txt", "foo bar foo\n", 0o640)
    c.write("r/b.txt", "nothing\n")
    a, b = c.p("r/a.txt"), c.p("r/b.txt")
    c.post("/files/replace", {a: {"old": "foo", "new": "baz"}}, label="replace")
    c.post("/files/replace", {a: {"old": "baz", "new": "q"}}, query={"verbose": "true"}, label="verbose")
    c.post("/files/replace", {b: {"old": "zzz", "new": "q"}}, query={"verbose": "true"}, label="verbose no match")
    c.post("/files/replace", {a: {"old": "", "new": "q"}}, label="empty old")
    c.post("/files/replace", {a: {"new": "q"}}, label="no old")
    c.post("/files/replace", {c.p("r/missing"): {"old": "a", "new": "b"}}, label="missing")
    c.post("/files/replace", {c.p("r"): {"old": "a", "new": "b"}}, label="directory")
    c.post("/files/replace", {a: {"old": "q", "new": "<&>\u00e9"}}, query={"verbose": "1"}, label="verbose=1")
    c.post("/files/replace", {c.p("r/$NOPE"): {"old": "a", "new": "b"}}, label="undefined env var")
    c.post("/files/replace", [], label="array")
    c.post("/files/replace", {a: {"old": 1}}, label="old number")
    c.snapshot("r", "fs after replace")


def _multipart(parts: list[tuple[str, str | None, bytes, str | None]], boundary: str = "XyZbOuNdArY") -> bytes:
    out = b""
    for name, filename, data, ctype in parts:
        out += f"--{boundary}\r\n".encode()
        disp = f'Content-Disposition: form-data; name="{name}"'
        if filename is not None:
            disp += f'; filename="{filename}"'
        out += disp.encode() + b"\r\n"
        if ctype:
            out += f"Content-Type: {ctype}\r\n".encode()
        out += b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def _upload(
    c: Ctx,
    label: str,
    parts: list[tuple[str, str | None, bytes, str | None]],
    *,
    boundary: str = "XyZbOuNdArY",
    ctype: str | None = None,
    body: bytes | None = None,
) -> None:
    data = body if body is not None else _multipart(parts, boundary)
    c.req(
        "POST",
        "/files/upload",
        body=data,
        headers=[("Content-Type", ctype or f"multipart/form-data; boundary={boundary}")],
        label=label,
    )


def _meta(path: str, **kw: Any) -> bytes:
    return json.dumps(dict(kw, path=path)).encode()


@case("files.upload", "POST /files/upload")
def _upload_cases(c: Ctx) -> None:
    c.write("u/afile", "x")
    P = c.p
    _upload(
        c, "one file", [("metadata", "m", _meta(P("u/one.txt")), "application/json"), ("file", "f", b"hello", None)]
    )
    _upload(c, "nested dirs", [("metadata", "m", _meta(P("u/x/y/z.bin")), None), ("file", "f", b"\x00\xff", None)])
    _upload(c, "mode 600", [("metadata", "m", _meta(P("u/m600"), mode=600), None), ("file", "f", b"m", None)])
    _upload(c, "mode 0", [("metadata", "m", _meta(P("u/m0"), mode=0), None), ("file", "f", b"m", None)])
    _upload(c, "mode 999", [("metadata", "m", _meta(P("u/m999"), mode=999), None), ("file", "f", b"m", None)])
    _upload(
        c,
        "owner nobody",
        [("metadata", "m", _meta(P("u/own"), owner="nobody", group="nogroup"), None), ("file", "f", b"o", None)],
    )
    _upload(
        c,
        "unknown owner",
        [("metadata", "m", _meta(P("u/own2"), owner="no-such-user-x"), None), ("file", "f", b"o", None)],
    )
    _upload(c, "overwrite", [("metadata", "m", _meta(P("u/one.txt")), None), ("file", "f", b"again", None)])
    # one path uploaded again and again, longer and shorter (the mock writes over it and cuts it: files._write_over)
    big = bytes(range(256)) * 800
    for label, data in (("big", big), ("shorter", b"short"), ("empty", b""), ("longer", big[::-1])):
        _upload(c, f"over {label}", [("metadata", "m", _meta(P("u/over.bin")), None), ("file", "f", data, None)])
        c.get("/files/download", query={"path": P("u/over.bin")}, label=f"over {label}: download")
        c.get("/files/info", query={"path": P("u/over.bin")}, label=f"over {label}: info")
    _upload(
        c,
        "two pairs",
        [
            ("metadata", "m1", _meta(P("u/p1")), None),
            ("metadata", "m2", _meta(P("u/p2")), None),
            ("file", "f1", b"1", None),
            ("file", "f2", b"2", None),
        ],
    )
    _upload(
        c,
        "count mismatch",
        [
            ("metadata", "m1", _meta(P("u/q1")), None),
            ("metadata", "m2", _meta(P("u/q2")), None),
            ("file", "f1", b"1", None),
        ],
    )
    _upload(c, "no metadata", [("file", "f", b"1", None)])
    _upload(c, "no file", [("metadata", "m", _meta(P("u/nf")), None)])
    _upload(c, "metadata not a file part", [("metadata", None, _meta(P("u/nofn")), None), ("file", "f", b"1", None)])
    _upload(c, "file not a file part", [("metadata", "m", _meta(P("u/nofn2")), None), ("file", None, b"1", None)])
    _upload(c, "bad metadata json", [("metadata", "m", b"{nope", None), ("file", "f", b"1", None)])
    _upload(c, "metadata trailing data", [("metadata", "m", _meta(P("u/td")) + b" x", None), ("file", "f", b"1", None)])
    _upload(c, "metadata empty", [("metadata", "m", b"", None), ("file", "f", b"1", None)])
    _upload(c, "metadata no path", [("metadata", "m", b"{}", None), ("file", "f", b"1", None)])
    _upload(c, "metadata array", [("metadata", "m", b"[]", None), ("file", "f", b"1", None)])
    _upload(
        c,
        "metadata mode string",
        [("metadata", "m", b'{"path": "/x", "mode": "644"}', None), ("file", "f", b"1", None)],
    )
    _upload(c, "target under a file", [("metadata", "m", _meta(P("u/afile/x")), None), ("file", "f", b"1", None)])
    _upload(c, "target is a dir", [("metadata", "m", _meta(P("u/x")), None), ("file", "f", b"1", None)])
    _upload(c, "undefined env var", [("metadata", "m", _meta(P("u/$NOPE")), None), ("file", "f", b"1", None)])
    _upload(
        c,
        "other parts ignored",
        [
            ("note", None, b"hi", None),
            ("metadata", "m", _meta(P("u/other")), None),
            ("extra", "e", b"e", None),
            ("file", "f", b"1", None),
        ],
    )
    _upload(c, "not multipart", [], ctype="application/json", body=b"{}")
    _upload(c, "no boundary", [], ctype="multipart/form-data", body=b"--x\r\n")
    _upload(c, "empty body", [], body=b"")
    _upload(
        c,
        "truncated",
        [],
        body=_multipart([("metadata", "m", _meta(P("u/tr")), None), ("file", "f", b"1", None)])[:-20],
    )
    _upload(
        c,
        "no closing boundary",
        [],
        body=_multipart([("metadata", "m", _meta(P("u/nc")), None), ("file", "f", b"1", None)]).rsplit(b"--XyZ", 1)[0],
    )
    _upload(
        c,
        "wrong boundary",
        [("metadata", "m", _meta(P("u/wb")), None), ("file", "f", b"1", None)],
        ctype="multipart/form-data; boundary=other",
    )
    _upload(
        c,
        "quoted boundary",
        [("metadata", "m", _meta(P("u/qb")), None), ("file", "f", b"qb", None)],
        ctype='multipart/form-data; boundary="XyZbOuNdArY"',
    )
    _upload(
        c,
        "relative target",
        [("metadata", "m", _meta("diff/" + c.dir.split("/")[-1] + "/u/rel"), None), ("file", "f", b"r", None)],
    )
    _upload(
        c,
        "lf only",
        [],
        body=_multipart([("metadata", "m", _meta(P("u/lf")), None), ("file", "f", b"lf", None)]).replace(
            b"\r\n", b"\n"
        ),
    )
    c.snapshot("u", "fs after uploads")


@case("files.upload.truncated", "POST /files/upload")
def _upload_truncated(c: Ctx) -> None:
    """A body cut anywhere: in the first boundary, a part's headers (Go ends the form there), its data."""
    full = _multipart([("metadata", "m", _meta(c.p("u/t")), None), ("file", "f", b"content", None)])
    for cut in (10, 21, 35, 63, 70, 77, 100, 140, 161, 170, len(full) - 30, len(full) - 3):
        _upload(c, f"cut at {cut}", [], body=full[:cut])
    c.snapshot("", "fs")
