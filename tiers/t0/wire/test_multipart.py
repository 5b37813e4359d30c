"""multipart/form-data writer -> incremental parser round trips (execd upload bodies)."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mock_opensandbox.wire import formdata as multipart

SHARED = pathlib.Path(__file__).resolve().parents[4] / "shared" / "live" / "exchanges"

tricky = st.lists(
    st.sampled_from(
        [b"\r\n", b"--", b"\r", b"\n", b"--osb", b"\r\n--osb", b"--osbX", b"x", b"\x00", b"\xff", b"\r\n\r\n"]
    ),
    max_size=12,
).map(b"".join)
payloads = st.one_of(st.binary(max_size=300), tricky)
names = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=12)
fields = st.lists(
    st.tuples(
        names.filter(bool),
        st.one_of(st.none(), names),
        st.one_of(st.none(), st.just("application/octet-stream")),
        payloads,
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(fields, st.integers(1, 64), st.sampled_from([None, "osb", "osbX-1"]))
def test_round_trip_any_payload_any_chunking(flds, chunk, boundary):
    try:
        body, ctype = multipart.encode(flds, boundary)
    except ValueError:
        return  # the fixed boundary occurs in a payload: the writer refuses (RFC 2046)
    b = multipart.boundary_from_content_type(ctype)
    parts = multipart.parse(body, b, chunk_size=chunk)
    assert [(p.name, p.filename, p.content_type, bytes(p.data)) for p in parts] == [(n, f, c, d) for n, f, c, d in flds]


def test_auto_boundary_avoids_payload():
    payload = b"\r\n--osbmock" + b"0" * 24
    body, ctype = multipart.encode([("file", "a", None, payload)])
    parts = multipart.parse(body, multipart.boundary_from_content_type(ctype), chunk_size=3)
    assert bytes(parts[0].data) == payload


@pytest.mark.parametrize("rec,idx", [("13_files_and_directories.json", 1), ("18_sdk_sync_flow.json", 5)])
def test_recorded_bodies(rec, idx):
    path = SHARED / rec
    if not path.exists():
        pytest.skip("recordings not available")
    ex = json.loads(path.read_text())[idx]["request"]
    ctype = {k.lower(): v for k, v in ex["headers"].items()}["content-type"]
    for chunk in (None, 1, 5):
        parts = multipart.parse(ex["body"].encode(), multipart.boundary_from_content_type(ctype), chunk)
        assert [p.name for p in parts][:2] == ["metadata", "file"]
        assert all(p.is_file for p in parts)
    if idx == 1:
        assert bytes(parts[1].data) == b"hello world\nline2\r\nline3"
        assert bytes(parts[3].data) == b"a,b\n1,2\n"


def test_lf_only_bodies_and_errors():
    body = b'--b\nContent-Disposition: form-data; name="f"; filename="x"\n\nhello\n--b--\n'
    parts = multipart.parse(body, "b")
    assert bytes(parts[0].data) == b"hello" and parts[0].filename == "x"
    with pytest.raises(multipart.MultipartError):
        multipart.parse(b'--b\r\nContent-Disposition: form-data; name="f"\r\n\r\nno end', "b")
    with pytest.raises(multipart.MultipartError):
        multipart.parse(b"--b\r\nbroken header line\r\n\r\nx\r\n--b--", "b")
    assert multipart.boundary_from_content_type("application/json") is None
    assert multipart.boundary_from_content_type('multipart/form-data; boundary="a b"') == "a b"


def test_a_parts_chunks_are_its_pieces_at_most_n_bytes_each():
    from mock_opensandbox.wire.formdata import Part

    part = Part([("Content-Disposition", 'form-data; name="file"; filename="x"')])
    part.add(bytearray(b"a" * 10))
    part.add(b"")
    part.add(b"bc")
    assert [bytes(c) for c in part.chunks(4)] == [b"aaaa", b"aaaa", b"aa", b"bc"]
    assert part.data == b"a" * 10 + b"bc" and part.size == 12


def test_pieces_handed_to_a_part_keep_their_bytes_while_the_parser_goes_on():
    """The data state hands its buffer itself to the part (no copy) and starts a new one: what a part holds
    is the payload byte for byte whatever the chunking, a boundary-like run inside included."""
    payload = os.urandom(200_000) + b"\r\n--bx" + os.urandom(70_000)
    body, _ = multipart.encode([("file", "f", "application/octet-stream", payload)], "bx0")
    for size in (1, 7, 4096, 65536, 1 << 20):
        parts = multipart.parse(body, "bx0", size if size < len(body) else None)
        assert len(parts) == 1 and bytes(parts[0].data) == payload, size
        assert sum(len(p) for p in parts[0].pieces) == len(payload)
