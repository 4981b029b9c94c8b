"""The per-device assembly of the paper's Sec. 3-6: parameters per stage and device, ZeRO, overheads,
the conventions' weight side, pipeline schedules, and the one device estimate (device.py)."""
