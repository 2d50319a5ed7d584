"""Checkpoint directories of each storage tier, scanned and followed (``ckptdirs``)."""
