"""Readers of the hardware: psutil, NVML, sysfs, Windows counters, servers. No Textual."""
