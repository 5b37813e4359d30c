"""The few rtnetlink requests the sandboxes' bridge needs (nethub.py), on a NETLINK_ROUTE socket: the
socket works in the network namespace it was made in, so a caller makes it there (``socket_in``) and
keeps it. What ``ip link add ... type bridge|veth``, ``ip addr add`` and ``ip route add`` send
(linux/rtnetlink.h, linux/if_link.h, linux/veth.h), no iproute2 needed. Root only. Standard library.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading

RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 17, 20, 24
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLMSG_ERROR = 2
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_TXQLEN = 1, 3, 4, 10, 13
IFLA_LINKINFO, IFLA_NET_NS_FD = 18, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST = 1, 2, 4
RTA_OIF, RTA_GATEWAY = 4, 5
IFF_UP = 0x1
RT_TABLE_MAIN, RTPROT_BOOT, RTN_UNICAST = 254, 3, 1
_HDR = struct.Struct("=IHHII")  # nlmsghdr
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg


def attr(kind: int, data: bytes) -> bytes:
    """One rtattr, padded to 4 bytes."""
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + bytes((4 - n % 4) % 4)


def ifinfo(index: int = 0, up: bool | None = None) -> bytes:
    flags = IFF_UP if up else 0
    return _IFINFO.pack(socket.AF_UNSPEC, 0, index, flags, IFF_UP if up is not None else 0)


def name_attr(name: str) -> bytes:
    return attr(IFLA_IFNAME, name.encode() + b"\0")


class Rtnl:
    """A NETLINK_ROUTE socket and its requests, each acknowledged (OSError with the kernel's errno)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.seq = 0
        self.lock = threading.Lock()

    def request(self, kind: int, flags: int, body: bytes) -> None:
        with self.lock:
            self.seq += 1
            seq = self.seq
            self.sock.send(_HDR.pack(_HDR.size + len(body), kind, flags | NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body)
            while True:
                data = self.sock.recv(65536)
                off = 0
                while off + _HDR.size <= len(data):
                    length, mtype, _, mseq, _ = _HDR.unpack_from(data, off)
                    if mtype == NLMSG_ERROR and mseq == seq:
                        code = struct.unpack_from("=i", data, off + _HDR.size)[0]
                        if code:
                            raise OSError(-code, os.strerror(-code))
                        return
                    off += max(length + (4 - length % 4) % 4, _HDR.size)

    def new_bridge(self, name: str, mac: bytes) -> None:
        info = attr(IFLA_LINKINFO, attr(IFLA_INFO_KIND, b"bridge"))
        body = ifinfo(up=True) + name_attr(name) + attr(IFLA_ADDRESS, mac) + info
        self.request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, body)

    def set_link(self, index: int, up: bool, master: int = 0) -> None:
        self.request(
            RTM_NEWLINK, 0, ifinfo(index, up) + (attr(IFLA_MASTER, struct.pack("=I", master)) if master else b"")
        )

    def new_veth(self, name: str, master: int, peer: str, peer_mac: bytes, peer_netns_fd: int, mtu: int) -> None:
        """``ip link add NAME mtu MTU master MASTER up type veth peer name PEER address MAC netns FD``:
        this end stays here, in MASTER, up; the peer (down, txqueuelen 0 like Docker's) is in the namespace."""
        peer_msg = (
            ifinfo()
            + name_attr(peer)
            + attr(IFLA_ADDRESS, peer_mac)
            + attr(IFLA_MTU, struct.pack("=I", mtu))
            + attr(IFLA_TXQLEN, struct.pack("=I", 0))
            + attr(IFLA_NET_NS_FD, struct.pack("=I", peer_netns_fd))
        )
        info = attr(IFLA_INFO_KIND, b"veth") + attr(IFLA_INFO_DATA, attr(VETH_INFO_PEER, peer_msg))
        body = (
            ifinfo(up=True)
            + name_attr(name)
            + attr(IFLA_MTU, struct.pack("=I", mtu))
            + attr(IFLA_TXQLEN, struct.pack("=I", 0))
            + attr(IFLA_MASTER, struct.pack("=I", master))
            + attr(IFLA_LINKINFO, info)
        )
        self.request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, body)

    def del_link(self, index: int) -> None:
        """``ip link del``: a veth's peer goes with it. Gone already: nothing to do."""
        try:
            self.request(RTM_DELLINK, 0, ifinfo(index))
        except OSError as exc:
            if exc.errno != errno.ENODEV:
                raise

    def add_addr(self, index: int, ip: str, prefix: int, broadcast: str) -> None:
        a = socket.inet_aton(ip)
        body = (
            _IFADDR.pack(socket.AF_INET, prefix, 0, 0, index)
            + attr(IFA_LOCAL, a)
            + attr(IFA_ADDRESS, a)
            + attr(IFA_BROADCAST, socket.inet_aton(broadcast))
        )
        self.request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, body)

    def add_default_route(self, gateway: str, index: int) -> None:
        msg = _RTMSG.pack(socket.AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, 0, RTN_UNICAST, 0)
        body = msg + attr(RTA_GATEWAY, socket.inet_aton(gateway)) + attr(RTA_OIF, struct.pack("=I", index))
        self.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, body)

    def close(self) -> None:
        self.sock.close()


def open_rtnl() -> Rtnl:
    """A NETLINK_ROUTE socket of the calling thread's network namespace."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    s.settimeout(5.0)
    s.bind((0, 0))
    return Rtnl(s)
