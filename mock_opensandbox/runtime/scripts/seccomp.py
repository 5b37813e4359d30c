# The system calls Docker's default seccomp profile closes to a container with the default capability
# set (moby/profiles seccomp/default.json: defaultAction SCMP_ACT_ERRNO, defaultErrnoRet 1; the entries
# that need a capability the sandbox lacks - CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_BOOT, ... - and the
# names the profile never lists), as a denylist: EPERM for each, clone with a namespace flag (the
# profile's mask 0x7E020000), socket(AF_VSOCK), and clone3 ENOSYS (the profile's errnoRet 38, so libc
# falls back to clone). Not modelled: personality's argument list, the 32-bit ABIs (i386 and x32 get
# EPERM for every call). ptrace/process_vm_* stay allowed as on kernels >= 4.8 (the profile's minKernel).
# Standard library only (ctypes, struct); exec'd by view.py, prepended to nsexec.py, run as the stage
# of a root join (holder.py) and imported by forkjoin.py. Call seccomp_install(libc) with
# no_new_privs set or CAP_SYS_ADMIN held; it returns 0 or the errno (EINVAL: no filter support).
import struct as _struct

TYPE_CHECKING = False  # (typing's is not imported: this runs before every sandbox command; annotations are text)
if TYPE_CHECKING:
    import ctypes

SECCOMP_DENY = {
    "x86_64": (
        0xC000003E,
        56,
        435,
        41,
        (
            163,
            248,
            321,
            227,
            174,
            176,
            313,
            177,
            239,
            175,
            173,
            172,
            312,
            320,
            246,
            250,
            212,
            237,
            165,
            279,
            180,
            304,
            298,
            155,
            178,
            179,
            443,
            169,
            249,
            238,
            308,
            164,
            167,
            168,
            139,
            156,
            166,
            272,
            134,
            323,
            136,
            103,
            300,
            438,
            430,
            431,
            432,
            433,
            429,
            428,
            442,
            425,
            426,
            427,
            153,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        220,
        435,
        198,
        (
            89,
            217,
            280,
            112,
            106,
            273,
            236,
            105,
            272,
            294,
            104,
            219,
            18,
            235,
            40,
            239,
            42,
            265,
            241,
            41,
            60,
            443,
            142,
            218,
            237,
            268,
            170,
            224,
            225,
            39,
            97,
            282,
            116,
            262,
            438,
            430,
            431,
            432,
            433,
            429,
            428,
            442,
            425,
            426,
            427,
            58,
        ),
    ),
}
CLONE_NS_MASK = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
AF_VSOCK = 40


def seccomp_program(machine: str) -> "bytes | None":
    """The BPF program (packed sock_filter array) for this machine, None for an unknown one."""
    spec = SECCOMP_DENY.get(machine)
    if spec is None:
        return None
    arch, clone, clone3, socket, deny = spec
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, JMP|JEQ|K, JMP|JSET|K, RET|K
    ins = [
        (ld, 0, 0, 4),
        (jeq, 1, 0, arch),
        (ret, 0, 0, eperm),  # another ABI: EPERM
        (ld, 0, 0, 0),
        (jset, 0, 1, 0x40000000),
        (ret, 0, 0, eperm),
    ]  # x32 numbers
    for nr in deny:
        ins += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    ins += [
        (jeq, 0, 1, clone3),
        (ret, 0, 0, enosys),  # an argument check ends in its own ret
        (jeq, 0, 4, clone),
        (ld, 0, 0, 16),
        (jset, 0, 1, CLONE_NS_MASK),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
        (jeq, 0, 4, socket),
        (ld, 0, 0, 16),
        (jeq, 0, 1, AF_VSOCK),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
        (ret, 0, 0, allow),
    ]
    return b"".join(_struct.pack("=HBBI", *i) for i in ins)


def seccomp_install(libc: "ctypes.CDLL", machine: "str | None" = None) -> int:
    """Install the filter in this thread (prctl PR_SET_SECCOMP, SECCOMP_MODE_FILTER; flag TSYNC is not
    needed: called single-threaded). 0 on success, else the errno."""
    import ctypes
    import os

    prog = seccomp_program(machine or os.uname().machine)
    if prog is None:
        return 22

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return ctypes.get_errno() or 22
    return 0
