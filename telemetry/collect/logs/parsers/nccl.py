"""NCCL's own lines (``host:pid:tid [cudaDev] NCCL WARN ...``): its errors, its word that it was
called or configured wrongly (nccl.h's result codes), its InfiniBand transport's failures, and
the communicator line saying where each rank runs (read in ``logranks``)."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import LineFormat, Signature

FORMAT = LineFormat(
    name="nccl",
    prefilter=(
        r"NCCL WARN",
        r"NCCL error",
        r"nccl[A-Z][A-Za-z]*Error",
        r"unhandled system error",
        r"emote process exited",
        r"NET/IB",
        r"NET/OFI",
        r"ibv_",
        r"IBV_",
        r"retry counter",
        r"[Ll]ink (?:is )?[Dd]own",
        r"nvalid usage|nvalid argument|ncclInvalid|no algorithm/protocol",  # NCCL_USAGE
        r"posix_fallocate failed|creating shared memory segment",  # ... /dev/shm too small
        r"NCCL INFO comm 0x[0-9a-fA-F]+ rank [0-9]+ n[Rr]anks [0-9]+",  # which host each rank is on
    ),
    signatures=(
        # the fabric's own word: InfiniBand's verbs, or libfabric's (aws-ofi-nccl: ``NET/OFI
        # Request ... completed with error. RC: 113. Error: 2 (UNDELIVERABLE)``)
        Signature(150, sig.IB_ERROR, ("IB", "ibv_", "retry counter", "ink", "OFI"),
                  re.compile(r"NET/IB.*(?:[Ee]rror|failed|status=[1-9])|ibv_\w+.*fail|IBV_WC_"
                             r"|NET/OFI.*completed with error"
                             r"|transport retry counter exceeded|[Ll]ink (?:is )?[Dd]own")),
        # NCCL's shared-memory transport could not allocate its segment: /dev/shm too small (a
        # container's 64 MB default; NVIDIA/nccl#290, pytorch/torchtitan#853), the host's setup
        Signature(210, sig.NCCL_USAGE, ("nvalid", "no algorithm", "fallocate", "shared memory"),
                  re.compile(r"ncclInvalid(?:Usage|Argument)|NCCL error[^,]*, invalid (?:usage|"
                             r"argument)|no algorithm/protocol available|Call to posix_fallocate "
                             r"failed|Error while creating shared memory segment")),
        Signature(220, sig.NCCL_ERROR, ("NCCL", "nccl", "unhandled", "emote process"),
                  re.compile(r"NCCL WARN|NCCL error|nccl[A-Z][A-Za-z]*Error|unhandled system error"
                             r"|[Rr]emote process exited")),
    ),
)
