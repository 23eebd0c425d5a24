"""AMD GPUs on Linux through the amdgpu driver's sysfs files (no library needed)."""

from __future__ import annotations

from pathlib import Path

from cliff_tui.records import GpuReading
from cliff_tui.text import inert

AMD_VENDOR_ID = "0x1002"
DRM_ROOT = Path("/sys/class/drm")


def read_sysfs_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def find_amd_cards(root: Path = DRM_ROOT) -> list[Path]:
    """``cardN/device`` folders of AMD GPUs that report VRAM (render nodes and connectors skipped)."""
    cards = []
    numbered = [card for card in root.glob("card[0-9]*") if card.name[4:].isdigit()]
    for card in sorted(numbered, key=lambda card: int(card.name[4:])):  # card2 before card10
        device = card / "device"
        try:
            vendor = (device / "vendor").read_text().strip()
        except OSError:
            continue
        if vendor == AMD_VENDOR_ID and (device / "mem_info_vram_total").exists():
            cards.append(device)
    return cards


class AmdSysfsProbe:
    def __init__(self, root: Path = DRM_ROOT) -> None:
        self.cards = find_amd_cards(root)

    def read(self, first_index: int = 0) -> list[GpuReading]:
        return [self._read_card(first_index + i, device) for i, device in enumerate(self.cards)]

    def _read_card(self, index: int, device: Path) -> GpuReading:
        reasons: dict[str, str] = {}
        used = read_sysfs_int(device / "mem_info_vram_used")
        total = read_sysfs_int(device / "mem_info_vram_total")
        busy = read_sysfs_int(device / "gpu_busy_percent")
        temp = _hwmon_temp(device)
        for name, value in (
            ("vram_used_bytes", used),
            ("vram_total_bytes", total),
            ("util_pct", busy),
            ("temperature_c", temp),
        ):
            if value is None:
                reasons[name] = f"not readable in {device}"
        return GpuReading(
            index=index,
            name=_product_name(device),
            vendor="amd",
            vram_used_bytes=used,
            vram_total_bytes=total,
            util_pct=None if busy is None else float(busy),
            temperature_c=temp,
            reasons=reasons,
        )


def _product_name(device: Path) -> str:
    try:
        name = (device / "product_name").read_text().strip()
    except OSError:
        name = ""
    return inert(name) or f"AMD GPU ({device.parent.name})"


def _hwmon_temp(device: Path) -> float | None:
    for temp in sorted(device.glob("hwmon/hwmon*/temp1_input")):
        milli = read_sysfs_int(temp)
        if milli is not None:
            return milli / 1000.0
    return None
