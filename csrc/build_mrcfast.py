"""cffi build script for mrcnic._mrcfast (API, out-of-line mode).

Convention: every csrc/<name>.c has a csrc/<name>.h that holds only declarations
cffi can parse (no preprocessor lines besides include guards, which are stripped).
The headers together are the cdef; the .c files together are the module's sources.
Adding C code means adding a .c/.h pair: nothing here needs editing.
"""

import ctypes.util
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent


def _cdef_text(header: Path) -> str:
    # cffi's cdef parser does not run the preprocessor: drop '#' lines (guards, includes).
    return "\n".join(
        line for line in header.read_text().splitlines() if not line.lstrip().startswith("#")
    )


def _libdeflate() -> str | None:
    """The file name of libdeflate's runtime library when the system has it (its CRC-32 is
    about 2.7x zlib's: csrc/mrc_crc.c), else None."""
    return ctypes.util.find_library("deflate")


headers = sorted(HERE.glob("*.h"))
deflate = _libdeflate()
sources = sorted(HERE.glob("*.c"))

ffibuilder = FFI()
ffibuilder.cdef("\n".join(_cdef_text(h) for h in headers))
ffibuilder.set_source(
    "mrcnic._mrcfast",
    "\n".join(f'#include "{h.name}"' for h in headers),
    sources=[str(s.relative_to(HERE.parent)) for s in sources],
    include_dirs=[str(HERE)],
    libraries=["z"],  # zlib's crc32: the ICRC (Python's zlib.crc32 is the same function)
    define_macros=[("MRC_HAVE_LIBDEFLATE", "1")] if deflate else [],
    extra_link_args=[f"-l:{deflate}"] if deflate else [],
    extra_compile_args=[
        "-O2",
        "-ffp-contract=off",
        # exported functions may still be inlined within their file (mrc_txe.c's output
        # helpers, which mrc_roce.c calls too, sit on the send loop's per-frame path)
        "-fno-semantic-interposition",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-D_GNU_SOURCE",
    ],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
