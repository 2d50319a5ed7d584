"""PyTorch's C++ side and the training loop: ProcessGroupNCCL's watchdog and heartbeat monitor
(``[rank3]:[E218 07:34:53.62 ...]`` lines; the glog stamp is read in ``stamps``), the CUDA
errors c10 raises or NCCL reports, and a loss gone NaN."""

from __future__ import annotations

import re

from telemetry import signals as sig
from telemetry.collect.logs.parsers.common import LineFormat, Signature

FORMAT = LineFormat(
    name="pytorch",
    prefilter=(
        r"atchdog",
        r"Heartbeat monitor",
        r"Timeout at NCCL",
        r"timed out in blocking wait",  # the NCCL timeout under TORCH_NCCL_BLOCKING_WAIT
        r"dump signal due to a collective timeout",  # the flight recorder told a rank timed out
        r"uncorrectable ECC",
        r"illegal (?:memory|address)",
        r"IllegalAddress",
        r"launch failure",
        r"out of memory",
        r"OutOfMemory",
        r"Cuda failure|unhandled cuda error",  # CUDA errors NCCL reports
        r"cudaError[A-Z]",  # the CUDA runtime's error names
        r"CUDA error: [a-zA-Z]|cuda runtime error \([0-9]+\)|THCudaCheck FAIL",  # ... in words
        r"busy or unavailable",  # its cudaErrorDevicesUnavailable in words
        r"(?i:loss (?:is|=|:) *[-+]?(?:nan|inf)|found (?:nan|inf))",
        r"\[c10d\] (?:\w+ failed on SocketImpl|(?:While )?waitForInput)",  # the store lost
    ),
    signatures=(
        Signature(100, sig.NCCL_TIMEOUT,
                  ("atchdog", "Heartbeat", "Timeout at", "blocking wait", "dump signal"),
                  # a cut line's "] Watchdog caught coll": the message starts after the
                  # "[Rank 0]"/"[PG 1 Rank 14]" prefix, not at its "]" (the detail starts here)
                  re.compile(r"(?<=\] )Watchdog caught coll|Watchdog caught collective operation "
                             r"timeout|watchdog got stuck|Heartbeat monitor timed out|Timeout at "
                             r"NCCL work|timed out in blocking wait|dump signal due to a "
                             r"collective timeout")),
        Signature(160, sig.CUDA_ECC, ("ECC",), re.compile(r"uncorrectable ECC error")),
        # the GPU given to the rank cannot be used (signals.CUDA_DEVICE_UNAVAILABLE)
        Signature(165, sig.CUDA_DEVICE_UNAVAILABLE, ("busy or unavailable", "DevicesUnavailable"),
                  re.compile(r"device\(s\) is/are busy or unavailable|devices are busy or "
                             r"unavailable|cudaErrorDevicesUnavailable")),
        Signature(170, sig.CUDA_ILLEGAL_ADDRESS, ("llegal", "misaligned"),
                  re.compile(r"illegal (?:memory access|address)|IllegalAddress|CUDA error: "
                             r"misaligned address")),
        Signature(180, sig.CUDA_LAUNCH_FAILURE, ("launch failure",),
                  re.compile(r"unspecified launch failure")),
        Signature(190, sig.CUDA_OOM, ("out of memory", "OutOfMemory"),
                  re.compile(r"CUDA out of memory|OutOfMemoryError|(?i:cuda) (?:error: |failure ')"
                             r"out of memory")),
        # a CUDA call NCCL made failed, of no kind above: say so, never "the network"
        # ... or a CUDA error of any other kind in c10's words ("CUDA error: unknown error" in a
        # watchdog's exception, vllm#2682) or THC's ("cuda runtime error (999) : unknown error")
        Signature(200, sig.CUDA_ERROR, ("uda failure", "unhandled cuda", "UnhandledCuda",
                                        "cudaError", "CUDA error: ", "cuda runtime error",
                                        "THCudaCheck"),
                  re.compile(r"Cuda failure \d+|unhandled cuda error|ncclUnhandledCudaError"
                             r"|cudaError[A-Z]\w*|CUDA error: [a-zA-Z]|cuda runtime error \(\d+\)"
                             r"|THCudaCheck FAIL")),
        # a rank lost the job's TCPStore (signals.STORE_LOST); "waitForInput: poll for socket
        # ... returned 0, likely a timeout" comes before the line that says it timed out
        Signature(225, sig.STORE_LOST, ("[c10d]",),
                  re.compile(r"\[c10d\] (?:\w+ failed on SocketImpl|While waitForInput, \w+ "
                             r"failed|waitForInput: socket .* timed out)")),
        Signature(230, sig.NAN_LOSS, ("nan", "NaN", "NAN", "inf", "Inf", "INF"),
                  re.compile(r"(?i:loss (?:is|=|:) *[-+]?(?:nan|inf)\b|found (?:nan|inf)\b)")),
    ),
)
