"""Text formatting shared by every command's report: byte sizes and aligned tables."""
from __future__ import annotations

__all__ = ["fmt_bytes", "text_table"]


def fmt_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``; whole bytes below 1 KiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; the first column left-aligned, the rest right."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
