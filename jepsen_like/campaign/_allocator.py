"""The harness process's C allocator setting for long runs.

What grew: a long TLS campaign's harness grew by about 1 KiB per
operation in native memory while its Python heap stayed flat. The bytes
were glibc's own heap: in use flat, free space inside the heap growing
(docs/nemesis.md, "Long runs"). glibc starts with a threshold of 128 KiB
above which ``malloc`` takes memory with ``mmap`` (given back on
``free``), and raises that threshold to the size of any such block that is
freed (up to 32 MiB). After a raise, short-lived large blocks (such as
the 256 KiB buffer each socket or TLS read allocates and then shrinks to
what arrived) come from the heap, between the blocks each new TLS
connection keeps for its life (OpenSSL's connection state): the holes
they leave are too small for the next large block, so the heap grows. An
in-process loop shows it (tests/campaign/test_allocator.py): requests over
six TLS connections, one of them replaced every ten requests, grow the
heap; with the threshold pinned they do not. Variants of the loop without
new connections, or over plain TCP, did not grow it (docs/benchmarks.md,
"The campaign harness's memory over a long run"). The harness opens new
TLS connections all through a run (a fresh client after an indeterminate
operation, a short-lived one per synthetic broker registration,
reconnections after faults), hence the growth with the operations.

``fix_mmap_threshold`` pins the threshold at glibc's starting value, which
also stops glibc from raising it (mallopt(3), ``M_MMAP_THRESHOLD``): the
large short-lived blocks always go to ``mmap`` and back, and the heap holds
only blocks below 128 KiB. The campaign CLI calls it just before the run,
for its own process only (the node processes it starts are not affected); a
program that embeds ``Campaign`` owns its allocator and decides itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

#: mallopt(3)'s parameter number for the mmap threshold (glibc's malloc.h).
M_MMAP_THRESHOLD = -3
#: glibc's own starting threshold (DEFAULT_MMAP_THRESHOLD_MIN), now kept.
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold at ``threshold_bytes`` for this process
    (and so switch off its dynamic raise). Returns True when set, False
    where the C library is not glibc (nothing to do) or refused it. Raises
    ``ValueError`` for a threshold below one page or above glibc's maximum
    (32 MiB)."""
    if not 4096 <= threshold_bytes <= 32 * 1024 * 1024:
        raise ValueError(f"the mmap threshold must be 4 KiB to 32 MiB, got {threshold_bytes}")
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold_bytes))
