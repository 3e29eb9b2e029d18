"""zhin — the ADR 0041 prompt assembler and the tools around it."""

__version__ = "0.1.0"
